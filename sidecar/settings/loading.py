"""Loading: YAML with line numbers, ``${ENV}`` expansion, pydantic errors mapped to paths and lines.

- String scalars may reference the environment: ``${VAR}`` (a missing variable is an error naming it),
  ``${VAR:-default}`` (default when unset or empty, as in a shell); ``$${`` gives a literal ``${``.
  Expansion happens after YAML parsing, so a value cannot inject YAML structure.
- Errors are collected into one :class:`SettingsError` whose lines read ``path.to.key (line N): message``.
  They never carry input values, so secrets cannot leak through them.
- A configuration comes from anyone who can open a pull request, so reading one is bounded (docs/limits.md): its
  size (``MAX_BYTES``), its values counted as aliases expand them (``MAX_VALUES``: a 1 KB alias bomb otherwise
  takes gigabytes), its nesting (``MAX_DEPTH``: an alias that holds itself otherwise recurses without end), and
  its bytes read as UTF-8 with one line naming the byte offset where they are not.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from sidecar.core.text_files import NotUtf8, read_utf8
from sidecar.settings.errors import SettingsError, SettingsProblem, _message
from sidecar.settings.judges import JudgeSettings
from sidecar.settings.root import EvalSettings, Settings
from sidecar.settings.scorers import ScorerSettings

__all__ = ["expand_env", "load_eval_settings", "load_settings", "load_settings_as_written", "unwrap_annotation"]


Loc = tuple[str | int, ...]
# Far above any real configuration (the example is 14 KB, about 400 values nested 6 deep), far below what hurts.
MAX_BYTES = 1024 * 1024
MAX_VALUES = 100_000
MAX_DEPTH = 64
_ENV_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?$", re.DOTALL)


class _EnvError(Exception):
    pass


class _Unbounded(Exception):
    """The document expands past a bound: one problem, under the key and at the line where it crossed."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


def expand_env(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``${VAR}`` and ``${VAR:-default}`` → values from the environment; ``$${`` → ``${``."""
    env = os.environ if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        ref = _ENV_NAME.match(match.group(1))
        if ref is None:
            raise _EnvError(f"bad variable reference ${{{match.group(1)}}}: use ${{NAME}} or ${{NAME:-default}}")
        name, default = ref["name"], ref["default"]
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise _EnvError(f"environment variable {name} is not set (use ${{{name}:-default}} for a default)")
            return default
        return value

    return _ENV_REF.sub(replace, text)


class _Document:
    """The YAML tree as plain data, with the line of every key and list item."""

    def __init__(self, text: str, environ: Mapping[str, str] | None) -> None:
        self.lines: dict[Loc, int] = {}
        self.problems: list[SettingsProblem] = []
        # Values that expanded to nothing (``${KAFKA_SASL_PASSWORD:-}`` with the variable unset): path -> the
        # value as written, so that a problem with that key can name the variable behind it.
        self.empty_expansions: dict[str, str] = {}
        self._environ = environ
        self._values = 0
        self._loader = yaml.SafeLoader(text)
        try:
            root = self._loader.get_single_node()
            self.data: Any = {} if root is None else self._build(root, ())
        finally:
            self._loader.dispose()

    def _count(self, node: yaml.Node, loc: Loc, depth: int) -> None:
        """One more value read at ``loc`` (an alias counts again each time it is used), ``depth`` levels in."""
        self._values += 1
        where = _path(loc[:2])  # the block it is in: the whole path may be 64 levels long
        if self._values > MAX_VALUES:
            raise _Unbounded(
                where,
                node.start_mark.line + 1,
                f"the configuration expands to more than {MAX_VALUES} values: YAML aliases (*name) repeat what "
                "their anchor (&name) holds, here over and over; write the values out",
            )
        if depth > MAX_DEPTH:
            raise _Unbounded(
                where,
                node.start_mark.line + 1,
                f"the configuration nests more than {MAX_DEPTH} levels deep (a YAML alias inside what its own "
                "anchor holds?)",
            )

    def _check_merges(self, node: yaml.MappingNode, loc: Loc, depth: int) -> None:
        """Merge keys (``<<: *anchor``) counted before PyYAML copies them in: merges of merges multiply."""
        self._count(node, loc, depth)
        for key_node, value_node in node.value:
            if key_node.tag != "tag:yaml.org,2002:merge":
                self._count(key_node, loc, depth)
                continue
            merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for sub in merged:
                if isinstance(sub, yaml.MappingNode):
                    self._check_merges(sub, loc, depth + 1)

    def _build(self, node: yaml.Node, loc: Loc) -> Any:
        self._count(node, loc, len(loc))
        if isinstance(node, yaml.MappingNode):
            if any(key.tag == "tag:yaml.org,2002:merge" for key, _ in node.value):
                self._check_merges(node, loc, len(loc))
            self._loader.flatten_mapping(node)  # merge keys (<<: *anchor)
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                # A key that is not a scalar is refused before it is built (it may be an alias bomb of its own).
                key = (
                    self._loader.construct_object(key_node, deep=True)
                    if isinstance(key_node, yaml.ScalarNode)
                    else None
                )
                if not isinstance(key, str | int | float | bool) or key is None:
                    self.problems.append(
                        SettingsProblem(_path(loc), key_node.start_mark.line + 1, "keys must be plain scalars")
                    )
                    continue
                key = str(key) if not isinstance(key, str) else key
                line = key_node.start_mark.line + 1
                if key in result:
                    self.problems.append(
                        SettingsProblem(
                            _path((*loc, key)), line, f"duplicate key (first on line {self.lines[(*loc, key)]})"
                        )
                    )
                    continue
                self.lines[(*loc, key)] = line
                result[key] = self._build(value_node, (*loc, key))
            return result
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.lines[(*loc, i)] = item.start_mark.line + 1
                items.append(self._build(item, (*loc, i)))
            return items
        value = self._loader.construct_object(node, deep=True)
        if isinstance(value, str) and "$" in value:
            written = value
            try:
                value = expand_env(value, self._environ)
            except _EnvError as exc:
                self.problems.append(SettingsProblem(_path(loc), node.start_mark.line + 1, str(exc)))
            else:
                if not value.strip() and _ENV_REF.search(written):
                    self.empty_expansions[_path(loc)] = written
        return value

    def line_of(self, loc: Loc) -> int | None:
        for end in range(len(loc), 0, -1):
            line = self.lines.get(loc[:end])
            if line is not None:
                return line
        return None


def _read_utf8(path: Path) -> str:
    """The file's text; a :class:`SettingsError` of one line when it cannot be read, or is not UTF-8."""
    try:
        if path.stat().st_size > MAX_BYTES:
            message = f"{path} is {path.stat().st_size} bytes, over {MAX_BYTES}: is it the right file?"
            raise SettingsError([SettingsProblem("", None, message)], str(path))
        return read_utf8(path)
    except OSError as exc:
        raise SettingsError([SettingsProblem("", None, f"cannot read {path}: {exc.strerror}")], str(path)) from None
    except NotUtf8 as exc:
        raise SettingsError([SettingsProblem("", None, str(exc))], str(path)) from None


def _naming_empty_variables(problem: SettingsProblem, empty: Mapping[str, str]) -> SettingsProblem:
    """``problem``, saying which variable left its key empty (a ``required`` message alone does not say that
    the key is written, as ``${VAR:-}``, and its variable unset)."""
    written = empty.get(problem.path)
    if written is None:
        return problem
    names = [ref["name"] for m in _ENV_REF.finditer(written) if m.group(1) and (ref := _ENV_NAME.match(m.group(1)))]
    unset = " and ".join(dict.fromkeys(names))
    verb = "is" if len(set(names)) == 1 else "are"
    return SettingsProblem(
        problem.path, problem.line, f"{problem.message} (written {written}: {unset} {verb} unset or empty)"
    )


def _path(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _data_loc(loc: Sequence[str | int], data: Any) -> Loc:
    """The part of a pydantic loc that names places in the data (drops union/validator tags)."""
    out: list[str | int] = []
    current = data
    for i, part in enumerate(loc):
        in_mapping = isinstance(current, Mapping) and part in current
        in_list = isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        if in_mapping or in_list:
            out.append(part)
            current = current[part]
        elif isinstance(current, Mapping) and isinstance(part, str) and i == len(loc) - 1:
            out.append(part)  # a missing key
        elif isinstance(current, Mapping) and isinstance(part, str) and all(isinstance(p, str) for p in loc[i:]):
            out.extend(loc[i:])  # a key under a missing/defaulted block
            break
        # else: a tag such as 'str' or 'list[str]' in a union, or 'function-after[...]': skip it
    return tuple(out)


def _model_at(loc: Sequence[str | int], root: type[BaseModel]) -> type[BaseModel] | None:
    """The model class validating the mapping at ``loc`` (for key suggestions)."""
    annotation: Any = root
    for part in loc:
        annotation = unwrap_annotation(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        else:
            origin = typing.get_origin(annotation)
            args = typing.get_args(annotation)
            if origin is dict and len(args) == 2:
                annotation = args[1]
            elif origin in (list, tuple) and args:
                annotation = args[0]
            else:
                return None
    annotation = unwrap_annotation(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def unwrap_annotation(annotation: Any) -> Any:
    """``X | None`` → ``X``; ``Annotated[X, ...]`` → ``X``."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _unknown_key_message(loc: Loc, root: type[BaseModel]) -> str:
    model = _model_at(loc[:-1], root)
    if model is None:
        return "unknown key"
    allowed = sorted(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key ({hint}allowed: {', '.join(allowed)})"


def _problems_from(exc: ValidationError, doc: _Document, root: type[BaseModel]) -> Iterator[SettingsProblem]:
    for err in exc.errors(include_url=False, include_input=False):
        loc = _data_loc(err["loc"], doc.data)
        message = _unknown_key_message(loc, root) if err["type"] == "extra_forbidden" else _message(err)
        yield SettingsProblem(_path(loc), doc.line_of(loc), message)


_PLACEHOLDER_KIND = ""  # no registered kind: an invalid scorer stands in as one no cross-block rule concerns


def _valid_blocks(data: Mapping[str, Any], model: type[EvalSettings]) -> dict[str, Any]:
    """The blocks of ``data`` that validate on their own. Scorers and judges are taken item by item, an
    invalid one kept as a placeholder so that the others keep their index (problems name ``scorers[3]``) and a
    judge's name stays declared; a block that does not validate stands as invalid (rules reading it are skipped)."""
    parts: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        raw = data.get(name)
        if name == "scorers" and isinstance(raw, list):
            scorers = []
            for i, item in enumerate(raw):
                try:
                    scorers.append(ScorerSettings.model_validate(item))
                except ValidationError:
                    fields: dict[str, Any] = {"id": f"(invalid scorers[{i}])", "kind": _PLACEHOLDER_KIND, "judge": None}
                    scorers.append(typing.cast(ScorerSettings, ScorerSettings.model_construct(**fields)))
            parts[name] = tuple(scorers)
        elif name == "judges" and isinstance(raw, dict):
            judges = {}
            for judge, item in raw.items():
                try:
                    judges[str(judge)] = JudgeSettings.model_validate(item)
                except ValidationError:
                    judges[str(judge)] = typing.cast(JudgeSettings, JudgeSettings.model_construct())
            parts[name] = judges
        elif raw is None and not field.is_required():
            parts[name] = field.get_default(call_default_factory=True)
        elif raw is not None and field.annotation is not None:
            try:
                parts[name] = TypeAdapter(field.annotation).validate_python(raw)
            except ValidationError:
                parts[name] = _INVALID  # written, but invalid: not "absent" to a rule that reads it
    return parts


class _InvalidBlock:
    """A block written but invalid: a rule reading it fails with AttributeError and is skipped, instead of taking
    the block for absent (its own problems are reported)."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


_INVALID = _InvalidBlock()


def _cross_block_problems(doc: _Document, model: type[EvalSettings]) -> Iterator[SettingsProblem]:
    """The rules that span blocks (the root model's after-validators: scorers naming declared judges, eval-only
    kinds in a live file, topics that must differ) run only once every field validates, and stop at the first
    rule that fails. Here each runs on the blocks that are valid on their own, so that one pass of ``validate``
    lists every problem. A rule that needs a block which is itself invalid is skipped: that block's own problems
    are reported, and the rule runs once they are fixed."""
    if not isinstance(doc.data, Mapping):
        return
    partial = model.model_construct(**_valid_blocks(doc.data, model))
    for decorator in model.__pydantic_decorators__.model_validators.values():
        if decorator.info.mode != "after":
            continue
        try:
            decorator.func(partial)
        except ValidationError as exc:
            yield from _problems_from(exc, doc, model)
        except (AttributeError, TypeError, KeyError):
            continue  # the rule reads a block left out above


def load_settings(source: str | Path, *, environ: Mapping[str, str] | None = None) -> Settings:
    """The live service's settings from a YAML file (a ``Path``) or YAML text (a ``str``).

    Raises :class:`SettingsError` with every problem. ``environ`` replaces ``os.environ`` for ``${VAR}``
    expansion (tests).
    """
    return _load(source, Settings, environ)


def load_eval_settings(source: str | Path, *, environ: Mapping[str, str] | None = None) -> EvalSettings:
    """Settings for ``eval``: the same file shape, ``kafka`` optional (Kafka is not used offline)."""
    return _load(source, EvalSettings, environ)


def load_settings_as_written(source: str | Path, *, environ: Mapping[str, str] | None = None) -> EvalSettings:
    """What ``validate`` checks: the live service's :class:`Settings` (every rule of ``run``) when the file has
    a ``kafka`` block, else :class:`EvalSettings` (a file for ``eval``)."""
    return _load(source, None, environ)


SettingsT = typing.TypeVar("SettingsT", bound=EvalSettings)


@typing.overload
def _load(source: str | Path, model: type[SettingsT], environ: Mapping[str, str] | None) -> SettingsT: ...


@typing.overload
def _load(source: str | Path, model: None, environ: Mapping[str, str] | None) -> EvalSettings: ...


def _load(source: str | Path, model: type[EvalSettings] | None, environ: Mapping[str, str] | None) -> EvalSettings:
    if isinstance(source, Path):
        name: str | None = str(source)
        text = _read_utf8(source)
    else:
        name, text = None, source
    if len(text) > MAX_BYTES:
        message = f"the configuration is {len(text)} characters, over {MAX_BYTES}: is it the right file?"
        raise SettingsError([SettingsProblem("", None, message)], name)
    try:
        doc = _Document(text, environ)
    except _Unbounded as exc:
        raise SettingsError([SettingsProblem(exc.path, exc.line, str(exc))], name) from None
    except yaml.reader.ReaderError as exc:
        raise SettingsError(
            [
                SettingsProblem(
                    "", None, f"YAML cannot hold character #x{exc.character:04x} (at character {exc.position})"
                )
            ],
            name,
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        detail = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise SettingsError(
            [SettingsProblem("", mark.line + 1 if mark else None, f"YAML syntax error: {detail}")], name
        ) from None
    except yaml.YAMLError as exc:
        raise SettingsError([SettingsProblem("", None, f"YAML error: {type(exc).__name__}")], name) from None
    if not isinstance(doc.data, dict):
        raise SettingsError([SettingsProblem("", 1, "the configuration must be a mapping (key: value)")], name)
    if model is None:
        model = Settings if "kafka" in doc.data else EvalSettings
    # Environment and duplicate-key problems are reported together with the validation problems
    # (a value whose variable is missing is validated unexpanded; its own validation error is dropped).
    problems = list(doc.problems)
    try:
        settings = model.model_validate(doc.data)
    except ValidationError as exc:
        known = {p.path for p in problems}
        problems.extend(p for p in _problems_from(exc, doc, model) if p.path not in known)
        seen = {(p.path, p.message) for p in problems}
        problems.extend(p for p in _cross_block_problems(doc, model) if (p.path, p.message) not in seen)
    if problems:
        problems = [_naming_empty_variables(p, doc.empty_expansions) for p in problems]
        raise SettingsError(sorted(problems, key=lambda p: (p.line or 0, p.path)), name)
    settings._source.lines.update((_path(loc), line) for loc, line in doc.lines.items())
    return settings
