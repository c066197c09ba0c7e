"""The configuration reference (docs/configuration.md), generated from the settings models: every key with its
type, its default and what it does, so that the page cannot fall behind the code (a test regenerates it and
compares).

What a key does is what its model says of it: the field's ``description`` when it has one, else the comment the
code keeps beside the field (its end-of-line comment, else the block of ``#`` lines right above it; a short block,
a group's heading, is carried to the fields below it until a blank line). A kind's ``options`` are the kind's own
(docs/scorers.md).

    scoring-sidecar config-reference > docs/configuration.md
"""

from __future__ import annotations

import inspect
import io
import tokenize
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from sidecar.settings.loading import unwrap_annotation
from sidecar.settings.root import Settings

__all__ = ["reference_markdown"]

_HEADER = """# Configuration reference

Every key of the configuration file, with its type, its default and what it does. Generated from the settings
models by `scoring-sidecar config-reference` (a test regenerates this page and compares), so it says what the
code accepts; `examples/sidecar.yaml` shows every key in a working file, and `scoring-sidecar validate --config
FILE` checks a file against these rules (every problem, with its key and line).

Strings expand `${VAR}` and `${VAR:-default}` from the environment. Unknown keys are errors. `judges.<name>` is
one judge per name; `scorers[]` one entry per scorer, whose `options` are its kind's (docs/scorers.md lists them
per kind). Durations are seconds, sizes bytes.
"""


# A comment this short heads the fields below it until a blank line; a longer one is its own field's.
_GROUP_HEADING = 50


@dataclass(frozen=True, slots=True)
class _Row:
    key: str
    type: str
    default: str
    text: str


def reference_markdown() -> str:
    """The page: one section per top-level block, a table of its keys."""
    out = [_HEADER]
    for name, field in Settings.model_fields.items():
        rows = list(_rows(name, field, Settings))
        out.append(f"\n## `{name}`\n")
        block = _model_of(field.annotation)
        if block is not None and block.__doc__ and block.__doc__ != BaseModel.__doc__:
            out.append(_one_line(inspect.cleandoc(block.__doc__)) + "\n")
        out.append("\n| key | type | default | what it does |\n|---|---|---|---|\n")
        out.extend(f"| `{r.key}` | {r.type} | {r.default} | {r.text} |\n" for r in rows)
    return "".join(out)


def _rows(path: str, field: FieldInfo, owner: type[BaseModel]) -> Iterator[_Row]:
    annotation = field.annotation
    model = _model_of(annotation)
    text = _describe(field, owner, path.rsplit(".", 1)[-1].split("[", 1)[0].split("<", 1)[0])
    if model is not None:
        if path.count(".") or path.endswith("]") or path.endswith(">"):
            yield _Row(path, "block", _default(field), text)
        inner = _inner_path(path, annotation)
        for name, sub in model.model_fields.items():
            if path.startswith("scorers") and name == "options":
                yield _Row(f"{inner}.options", "block", "none", "the kind's own options (docs/scorers.md)")
                continue
            yield from _rows(f"{inner}.{name}", sub, model)
        return
    yield _Row(path, _type(annotation) + _constraints(field), _default(field), text)


def _inner_path(path: str, annotation: Any) -> str:
    """``judges`` → ``judges.<name>``, ``scorers`` → ``scorers[]``, a block → itself."""
    annotation = unwrap_annotation(annotation)
    origin = typing.get_origin(annotation)
    if origin is dict:
        return f"{path}.<name>"
    if origin in (tuple, list):
        return f"{path}[]"
    return path


def _model_of(annotation: Any) -> type[BaseModel] | None:
    annotation = unwrap_annotation(annotation)
    origin = typing.get_origin(annotation)
    if origin is dict:
        annotation = unwrap_annotation(typing.get_args(annotation)[1])
    elif origin in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        annotation = unwrap_annotation(args[0]) if len(args) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        parts = [_type(a) for a in typing.get_args(annotation) if a is not type(None)]
        optional = type(None) in typing.get_args(annotation)
        return " or ".join(parts) + (" (optional)" if optional else "")
    if origin is Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin in (tuple, list, set, frozenset):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"list of {_type(args[0])}" if len(args) == 1 else "list"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"map of {_type(key)} to {_type(value)}"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "block"
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation).replace("typing.", "")


def _constraints(field: FieldInfo) -> str:
    bounds = []
    for item in field.metadata:
        for name, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            value = getattr(item, name, None)
            if value is not None:
                bounds.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return f", {' and '.join(bounds)}" if bounds else ""


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(block)"
    if value is None:
        return "none"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list, frozenset, set)):
        return "`[" + ", ".join(str(v) for v in value) + "]`" if value else "`[]`"
    if isinstance(value, dict):
        return "`{}`" if not value else "`" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def _describe(field: FieldInfo, owner: type[BaseModel], name: str) -> str:
    """The field's description, else its comment, else (a block) its model's docstring."""
    if field.description:
        return _one_line(field.description)
    comment = _field_comments(owner).get(name, "")
    if comment:
        return _one_line(comment)
    block = _model_of(field.annotation)
    if block is not None and block.__doc__ and block.__doc__ != BaseModel.__doc__:
        return _one_line(inspect.cleandoc(block.__doc__))
    return ""


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


@cache
def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Each field of ``model``'s class body with the comment the code keeps for it, from the fields of every class
    it inherits from too."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                continue
            found.update(_comments_of(source))
    return found


def _comments_of(source: str) -> dict[str, str]:
    """``name: type = ...`` lines at the class body's indentation, each with the ``#`` block above it (carried down
    to the following fields until a blank line) or its own end-of-line comment."""
    lines = source.splitlines()
    body_indent: int | None = None
    block: list[str] = []
    carried = ""
    out: dict[str, str] = {}
    comments = _end_of_line_comments(source)
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if number == 1 or not stripped:
            block, carried = [], ""
            continue
        if body_indent is None:
            body_indent = indent
        if indent != body_indent:
            continue
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        head = stripped.split(":", 1)[0]
        if ":" in stripped and head.isidentifier() and not stripped.startswith(("def ", "class ", "@", "_")):
            if block:
                text = " ".join(block)
                # A short comment heads a group of fields ("consumer tuning"); a longer one speaks of its own field.
                carried = text if len(text) <= _GROUP_HEADING else ""
                block = []
                out[head] = comments.get(number) or text
                continue
            out[head] = comments.get(number) or carried
        else:
            block, carried = [], ""
    return out


def _end_of_line_comments(source: str) -> dict[int, str]:
    found: dict[int, str] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError):
        return found
    code_lines = {t.start[0] for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)}
    for token in tokens:
        if token.type == tokenize.COMMENT and token.start[0] in code_lines:
            found[token.start[0]] = token.string.lstrip("#").strip()
    return found
