"""The prompt template of a judge written in YAML: parsed and checked once, rendered per run.

The engine is Jinja2's sandbox (``ImmutableSandboxedEnvironment``, strict undefined): the template is the
operator's and trusted, but it is still code read from a configuration file, so it gets no Python
attributes, no imports, no includes. Why this engine: docs/custom-judges.md.

The variables are traced content and untrusted. They never pass through the template engine: the template
sees opaque values that print as a placeholder; after rendering, each placeholder is replaced, in one pass
over the template's own output, by the value's text quoted as the prebuilt prompts quote traced content
(``quote_untrusted``: ``<untrusted_…>`` tags, copies of those tags inside defused). Content holding ``{{ }}``
or ``{% %}`` is therefore never evaluated, and content can never close its quote, whatever the template
does with the value. A template may test a value (``{% if context %}``), count a list
(``{{ tool_calls | length }}``) and iterate one (each item quoted on its own); a filter that would change the
text (``{{ output | upper }}``) mangles the placeholder, and is refused when the template is checked.

Every render is bounded in steps, time and characters, and the template sees a narrower Jinja
(``llm_judge_sandbox``); what can be told from the template alone is refused when it is checked: recursion (a
macro that calls itself, a recursive loop, ``self``), a filter the sandbox does not offer, a Jinja global printed
as it is (``{{ range }}`` would send a function's repr), a template over ``MAX_TEMPLATE_CHARS``.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, nodes
from jinja2 import meta as jinja_meta

from sidecar.scorers.custom.llm_judge_checks import static_problems
from sidecar.scorers.custom.llm_judge_sandbox import (
    DEFAULT_MAX_CHARS,
    MAX_TEMPLATE_CHARS,
    RENDER_TIMEOUT_S,
    BoundedSandbox,
    Placeholder,
    RenderLimitError,
    RenderTimeError,
    bounded_syntax,
    render_budget,
)
from sidecar.scorers.custom.llm_judge_variables import (
    ATTRIBUTE_NAMESPACES,
    VARIABLES,
    AttributeNamespace,
    RunText,
    attribute_text,
    empty_text,
    joined,
)
from sidecar.scoring.prompting import quote_untrusted

__all__ = [
    "JudgeTemplate",
    "TemplateProblem",
    "TemplateProblems",
    "TemplateTimeout",
    "TemplateUseError",
    "compile_template",
]

# Placeholders are built from private-use characters: the template's own text never holds them by accident,
# and a leftover one after substitution means the template changed a value's text.
_OPEN, _CLOSE = "\ue000", "\ue001"
# Letters of both cases inside: a case filter (upper, lower, title, capitalize) changes the placeholder too.
_TOKEN = re.compile(f"{_OPEN}qV(\\d+){_CLOSE}")
_FORBIDDEN_NODES = (nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)


@dataclass(frozen=True, slots=True)
class TemplateProblem:
    line: int | None  # the template's own line (1-based)
    message: str

    def __str__(self) -> str:
        return f"template line {self.line}: {self.message}" if self.line is not None else self.message


class TemplateProblems(ValueError):
    """Every problem of a template at once, each with its template line."""

    def __init__(self, problems: list[TemplateProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


class TemplateUseError(ValueError):
    """The template changed a value's text, or failed on a run's values."""


class TemplateTimeout(TemplateUseError):
    """The render took longer than it was given."""


# -- the values the template sees ----------------------------------------------------------------------------


class _Slots:
    """The quoted texts of one rendering, by placeholder number."""

    __slots__ = ("texts",)

    def __init__(self) -> None:
        self.texts: list[str] = []

    def add(self, quoted: str) -> str:
        self.texts.append(quoted)
        return f"{_OPEN}qV{len(self.texts) - 1}{_CLOSE}"


class _Value(Placeholder):
    """A variable as the template sees it: true when the run has it, printed as a placeholder for its quote.

    ``quoted_inside``: the text already quotes each piece of traced content it holds (a conversation's turns,
    ``render_turn``), so it goes in as it is."""

    __slots__ = ("_label", "_present", "_quoted_inside", "_shown", "_slots", "_token")

    def __init__(self, slots: _Slots, label: str, text: str, empty: str, *, quoted_inside: bool = False) -> None:
        self._slots = slots
        self._label = label
        self._present = bool(text)
        self._shown = text if text else empty
        self._quoted_inside = quoted_inside
        self._token: str | None = None

    def __str__(self) -> str:
        if self._token is None:
            shown = self._shown if self._quoted_inside else quote_untrusted(self._label, self._shown)
            self._token = self._slots.add(shown)
        return self._token

    def __bool__(self) -> bool:
        return self._present

    def __repr__(self) -> str:
        # A filter that prints a value's repr (list, pprint) would send an object's address, not the text.
        raise TypeError("a variable printed through a filter (list, pprint...): print it as it is")


class _Items(_Value):
    """A list variable: printed whole (one item per line), counted, iterated or indexed item by item."""

    __slots__ = ("_empty", "_item", "_items")

    def __init__(
        self,
        slots: _Slots,
        label: str,
        item: str,
        items: tuple[str, ...],
        whole: str,
        empty: str,
        *,
        quoted_inside: bool = False,
    ) -> None:
        super().__init__(slots, label, whole, empty, quoted_inside=quoted_inside)
        self._item = item
        self._items = items
        self._empty = empty

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[_Value]:
        return (self._one(text) for text in self._items)

    def __getitem__(self, index: Any) -> _Value:
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError("a list variable is indexed by a number")
        try:
            return self._one(self._items[index])
        except IndexError:
            return self._one("")

    def _one(self, text: str) -> _Value:
        return _Value(self._slots, self._item, text, self._empty, quoted_inside=self._quoted_inside)


class _AttributeTable:
    """``span.attributes`` / ``resource.attributes``: a value per key (a key the run lacks reads as not set)."""

    __slots__ = ("_label", "_slots", "_values")

    def __init__(self, slots: _Slots, label: str, values: Mapping[str, Any]) -> None:
        self._slots = slots
        self._label = label
        self._values = values

    def __getitem__(self, key: Any) -> _Value:
        return _Value(self._slots, self._label, attribute_text(self._values.get(str(key))), empty_text(""))


class _Namespace:
    __slots__ = ("attributes",)

    def __init__(self, attributes: _AttributeTable) -> None:
        self.attributes = attributes


class _JudgeEnvironment(BoundedSandbox):
    """The bounded sandbox, closed further: the values offer nothing but what the module doc lists."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, _Namespace):
            return attr == "attributes"
        if isinstance(obj, _Value | _AttributeTable):
            return False
        return bool(super().is_safe_attribute(obj, attr, value))


_ENVIRONMENT = _JudgeEnvironment(
    undefined=StrictUndefined,
    autoescape=False,
    # Block tags take their own line away: a prompt reads as written, without blank lines left by {% if %}.
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=False,
)

# Names the template may use beyond the variables: Jinja's loop variable and its globals (range, namespace, …),
# not the sandbox's own guards.
_JINJA_NAMES = frozenset({"loop", *(name for name in _ENVIRONMENT.globals if not name.startswith("_"))})


# -- the compiled template -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeTemplate:
    source: str
    # The variables it names (``VARIABLES`` keys), with the line each is first named on.
    variables: Mapping[str, int]
    # The attribute keys it reads, by namespace, with the line each is first read on.
    attributes: Mapping[AttributeNamespace, Mapping[str, int]]
    compiled: Any  # the Jinja template

    def render(
        self,
        texts: Mapping[str, RunText],
        span_attributes: Mapping[str, Any] | None = None,
        resource_attributes: Mapping[str, Any] | None = None,
        *,
        max_chars: int = DEFAULT_MAX_CHARS,
        timeout_s: float = RENDER_TIMEOUT_S,
    ) -> str:
        """The prompt for one run: ``texts`` holds each named variable's text for it. ``max_chars``: the judge's
        bound on a prompt (the render stops once it produces more, and a prompt longer is refused); ``timeout_s``:
        the render's time (:class:`TemplateTimeout` past it)."""
        slots = _Slots()
        context: dict[str, Any] = {name: _value(slots, name, texts.get(name, "")) for name in self.variables}
        if "span" in self.attributes:
            context["span"] = _Namespace(_AttributeTable(slots, "span_attribute", span_attributes or {}))
        if "resource" in self.attributes:
            context["resource"] = _Namespace(_AttributeTable(slots, "resource_attribute", resource_attributes or {}))
        try:
            with render_budget(max_chars, timeout_s):
                rendered = self.compiled.render(context)
        except RenderTimeError as exc:
            raise TemplateTimeout(f"the prompt template went past its bounds on this run: {exc}") from None
        except RenderLimitError as exc:
            raise TemplateUseError(f"the prompt template went past its bounds on this run: {exc}") from None
        except RecursionError:
            raise TemplateUseError("the prompt template recursed without end on this run") from None
        except MemoryError:
            raise TemplateUseError("the prompt template ran out of memory on this run") from None
        except (TemplateError, TypeError, ValueError, LookupError, ArithmeticError) as exc:
            raise TemplateUseError(f"the prompt template failed on this run: {exc}") from None
        pieces = _TOKEN.split(rendered)
        if any(int(piece) >= len(slots.texts) for piece in pieces[1::2]):  # a token written in the template itself
            raise TemplateUseError("the prompt template holds characters of the private-use area (U+E000, U+E001)")
        size = sum(len(slots.texts[int(piece)]) if i % 2 else len(piece) for i, piece in enumerate(pieces))
        if size > max_chars:
            raise TemplateUseError(
                f"the prompt would be {size} characters, over the judge's max_prompt_chars ({max_chars}): the run's "
                "content is larger than the judge takes"
            )
        out: list[str] = []
        placed: set[int] = set()
        for i, piece in enumerate(pieces):
            if i % 2:  # a placeholder's number: its quote goes in, never scanned again
                placed.add(int(piece))
                out.append(slots.texts[int(piece)])
            elif _OPEN in piece or _CLOSE in piece:
                raise TemplateUseError(
                    "the prompt template changes a variable's text (a filter such as upper, truncate or replace on "
                    "it): print variables as they are, e.g. {{ output }}"
                )
            else:
                out.append(piece)
        if len(placed) < len(slots.texts):  # a value was read as text, then its text never reached the prompt
            raise TemplateUseError(
                "the prompt template turns a variable into something else (a filter such as wordcount, list or "
                "map('string') on it): print variables as they are, e.g. {{ output }}"
            )
        return "".join(out).strip()

    @property
    def attribute_keys(self) -> Mapping[AttributeNamespace, frozenset[str]]:
        return {namespace: frozenset(keys) for namespace, keys in self.attributes.items()}


def _value(slots: _Slots, name: str, text: RunText) -> _Value:
    variable = VARIABLES[name]
    if isinstance(text, tuple):
        assert variable.item is not None
        whole = joined(name, text)
        return _Items(slots, name, variable.item, text, whole, variable.empty, quoted_inside=variable.quoted_inside)
    return _Value(slots, name, text, variable.empty, quoted_inside=variable.quoted_inside)


@functools.lru_cache(maxsize=256)
def compile_template(source: str) -> JudgeTemplate:
    """Parse and check a template once. Raises :class:`TemplateProblems` with every problem found (template
    line, and for an unknown name the variable it was probably meant to be)."""
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateProblems(
            [TemplateProblem(None, f"the template is {len(source)} characters, over {MAX_TEMPLATE_CHARS}")]
        )
    try:
        ast = _ENVIRONMENT.parse(source)
    except TemplateSyntaxError as exc:
        raise TemplateProblems([TemplateProblem(exc.lineno, exc.message or "invalid template syntax")]) from None
    except RecursionError:  # thousands of nested brackets: the parser recurses per level
        raise TemplateProblems([TemplateProblem(None, "the template nests too deep to be read")]) from None
    problems: list[TemplateProblem] = []
    for node in ast.find_all(_FORBIDDEN_NODES):
        problems.append(TemplateProblem(node.lineno, "a judge's template stands alone: no extends, include or import"))
    problems.extend(TemplateProblem(line, message) for line, message in static_problems(ast, _JINJA_NAMES))
    try:
        declared = jinja_meta.find_undeclared_variables(ast)  # compiles the template: an unknown filter fails it
    except TemplateSyntaxError as exc:
        raise TemplateProblems(problems or [TemplateProblem(exc.lineno, exc.message or "invalid template")]) from None
    first_line = _first_lines(ast)
    variables: dict[str, int] = {}
    for name in sorted(declared, key=lambda n: (first_line.get(n, 0), n)):
        if name in VARIABLES:
            variables[name] = first_line.get(name, 1)
        elif name not in ATTRIBUTE_NAMESPACES and name not in _JINJA_NAMES:
            problems.append(TemplateProblem(first_line.get(name), _unknown(name)))
    attributes, misuse = _attribute_reads(ast)
    problems.extend(misuse)
    if not variables and not attributes and not problems:
        problems.append(
            TemplateProblem(
                None, f"the template names no variable: the judge would see nothing of the run ({_listed()})"
            )
        )
    if problems:
        raise TemplateProblems(problems)
    try:
        compiled = _ENVIRONMENT.from_string(bounded_syntax(ast, _ENVIRONMENT))
    except TemplateSyntaxError as exc:  # what only the compiler finds (a block defined twice)
        raise TemplateProblems([TemplateProblem(exc.lineno, exc.message or "invalid template syntax")]) from None
    except RecursionError:
        raise TemplateProblems([TemplateProblem(None, "the template nests too deep to be compiled")]) from None
    template = JudgeTemplate(source=source, variables=variables, attributes=attributes, compiled=compiled)
    _check_renders(template)
    return template


def _first_lines(ast: nodes.Template) -> dict[str, int]:
    lines: dict[str, int] = {}
    for node in ast.find_all(nodes.Name):
        if node.ctx == "load":
            lines.setdefault(node.name, node.lineno)
    return lines


def _unknown(name: str) -> str:
    candidates = [*VARIABLES, "span.attributes", "resource.attributes"]
    close = difflib.get_close_matches(name, candidates, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown variable {name!r} ({hint}{_listed()})"


def _listed() -> str:
    return f"variables: {', '.join(VARIABLES)}, span.attributes['KEY'], resource.attributes['KEY']"


def _attribute_reads(
    ast: nodes.Template,
) -> tuple[dict[AttributeNamespace, dict[str, int]], list[TemplateProblem]]:
    """The keys read as ``span.attributes['KEY']`` / ``resource.attributes['KEY']``; any other use of ``span``
    or ``resource`` is a problem (the key must be written out: ingest keeps only the keys templates name)."""
    found: dict[AttributeNamespace, dict[str, int]] = {}
    proper: set[int] = set()
    for node in ast.find_all(nodes.Getitem):
        holder = _attributes_of(node.node)
        if not (isinstance(holder, nodes.Name) and holder.name in ATTRIBUTE_NAMESPACES and holder.ctx == "load"):
            continue
        if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str) and node.arg.value:
            namespace: AttributeNamespace = "span" if holder.name == "span" else "resource"
            found.setdefault(namespace, {}).setdefault(node.arg.value, node.lineno)
            proper.add(id(holder))
    problems = [
        TemplateProblem(
            node.lineno,
            f"{node.name} offers its attributes by a written-out key: {node.name}.attributes['KEY'] "
            f"(e.g. {node.name}.attributes['{_EXAMPLE_KEYS[node.name]}'])",
        )
        for node in ast.find_all(nodes.Name)
        if node.name in ATTRIBUTE_NAMESPACES and node.ctx == "load" and id(node) not in proper
    ]
    return found, problems


def _attributes_of(table: nodes.Node) -> nodes.Node | None:
    """What ``X.attributes`` (or ``X['attributes']``) reads the attributes of; None for anything else."""
    if isinstance(table, nodes.Getattr):
        return table.node if table.attr == "attributes" else None
    if isinstance(table, nodes.Getitem) and isinstance(table.arg, nodes.Const) and table.arg.value == "attributes":
        return table.node
    return None


_EXAMPLE_KEYS = {"span": "gen_ai.agent.name", "resource": "service.version"}


def _check_renders(template: JudgeTemplate) -> None:
    """Render once with every value present and once with every value absent: a template that fails, or that
    changes a value's text, is refused now rather than on every run."""
    keys = template.attribute_keys
    full: dict[str, RunText] = {
        name: (f"sample {name} one", f"sample {name} two") if VARIABLES[name].item else f"sample {name}"
        for name in template.variables
    }
    span = {key: "sample" for key in keys.get("span", ())}
    resource = {key: "sample" for key in keys.get("resource", ())}
    try:
        template.render(full, span, resource)
        template.render({name: () if VARIABLES[name].item else "" for name in template.variables})
    except TemplateUseError as exc:
        raise TemplateProblems([TemplateProblem(None, str(exc).replace(" on this run", ""))]) from None
