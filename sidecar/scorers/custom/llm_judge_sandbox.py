"""The sandbox a judge's template renders in, bounded in time, memory and output (docs/limits.md).

Jinja's sandbox keeps a template away from Python; it does not bound what a template computes: ``{{ 'a'*10**9 }}``
allocates a gigabyte while Jinja folds it as a constant, ``7**(7**9)`` or nested ``range(100000)`` loops never
end, a macro that calls itself recurses until Python gives up. A configuration comes from anyone who can open a
pull request, and ``validate`` renders every template, so here every render has a budget:

- **steps**: each loop iteration, call, filter, operator and output counts one; past ``MAX_STEPS`` the render
  stops. Loops are counted by a filter wrapped around each loop's iterable (``_loop``), the ``~`` operator by
  ``_concat``: the template's syntax tree is rewritten once, when it is compiled (:func:`bounded_syntax`); output
  by the environment's ``finalize`` (``_finalize``), the template's own text included;
- **time**: checked at every step; past ``RENDER_TIMEOUT_S`` the render stops;
- **characters**: whatever a render produces (printed, captured by ``{% set %}`` blocks, macros, joined or
  concatenated) counts against the prompt's bound (``judges.<name>.max_prompt_chars``), and every value an operator,
  a filter or a call builds is refused before it is built when it would be larger (``'a' * 10**9``,
  ``x|join`` of a list of large strings, ``s.replace(...)``), or its size depends on a number a template may
  make as large as it likes (``7 ** 7 ** 9``: at most ``_MAX_INT_BITS`` bits).

Beyond that, the template sees less than Jinja's default: the filters that keep their output within a small
multiple of their input (``FILTERS``; not ``center``, ``wordwrap``, ``format``, ``batch``, ``slice``, ``sum``,
``pprint``, ``random`` ...), a handful of methods on strings (``_STR_METHODS``; not ``ljust``, ``zfill``,
``format``), none on numbers, and no ``lipsum``. What a template prints must be text, a number or a
variable: a function, a class, a list or any other object would send its Python repr (``_emit``).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, cast

from jinja2 import Undefined, nodes, pass_context
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from sidecar.scoring.judge.model import DEFAULT_MAX_PROMPT_CHARS

__all__ = [
    "FILTERS",
    "MAX_STEPS",
    "MAX_TEMPLATE_CHARS",
    "RENDER_TIMEOUT_S",
    "BoundedSandbox",
    "Placeholder",
    "RenderError",
    "RenderLimitError",
    "RenderTimeError",
    "bounded_syntax",
    "render_budget",
]

MAX_STEPS: Final = 100_000
RENDER_TIMEOUT_S: Final = 1.0
MAX_TEMPLATE_CHARS: Final = 100_000
# The prompt bound when none is given (a judge's max_prompt_chars default).
DEFAULT_MAX_CHARS: Final = DEFAULT_MAX_PROMPT_CHARS
_MAX_INT_BITS: Final = 4096  # a number of 1,233 digits: more than a prompt will ever print
_MAX_WIDTH: Final = 10_000  # the largest width or count a %-format may ask for

# The filters a judge's template may use: each keeps its output within a small multiple of its input (the
# value checks below bound the multiple where it depends on an argument).
# fmt: off
FILTERS: Final = frozenset({
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "forceescape", "groupby", "indent", "int", "items", "join", "last", "length", "list", "lower", "map",
    "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr",
    "sort", "string", "striptags", "title", "trim", "truncate", "unique", "upper", "wordcount",
})
# Filters whose value is read as text: a list or a mapping would become its Python repr.
_TEXT_FILTERS: Final = frozenset({
    "capitalize", "e", "escape", "forceescape", "indent", "lower", "replace", "string", "striptags", "title",
    "trim", "truncate", "upper", "wordcount",
})
_STR_METHODS: Final = frozenset({
    "capitalize", "casefold", "count", "endswith", "find", "index", "isalnum", "isalpha", "isdigit", "islower",
    "isspace", "istitle", "isupper", "lower", "lstrip", "partition", "removeprefix", "removesuffix", "rfind",
    "rindex", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title",
    "upper",
})
# fmt: on
_FORMAT_NUMBER = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


class RenderError(ValueError):
    """The render would send something that is not text."""


class RenderLimitError(RenderError):
    """The render went past one of its bounds."""


class RenderTimeError(RenderLimitError):
    """The render went past its time."""


class Placeholder:
    """A value printed as a short token that stands for its text (the template's variables)."""

    __slots__ = ()
    PRINTED_CHARS: Final = 16


@dataclass(slots=True)
class _Budget:
    deadline: float
    timeout_s: float
    max_chars: int
    steps: int = MAX_STEPS
    produced: int = 0


_BUDGET: ContextVar[_Budget | None] = ContextVar("judge_template_budget", default=None)


@contextmanager
def render_budget(max_chars: int, timeout_s: float = RENDER_TIMEOUT_S) -> Iterator[None]:
    """The bounds of one render (for the code running inside it: context variables follow it into a thread)."""
    token = _BUDGET.set(_Budget(time.monotonic() + timeout_s, timeout_s, max_chars))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _step() -> None:
    budget = _BUDGET.get()
    if budget is None:  # Jinja folding a constant while it compiles: the value checks still hold
        return
    budget.steps -= 1
    if budget.steps < 0:
        raise RenderLimitError(
            f"the template takes more than {MAX_STEPS} steps (loop iterations, calls, filters, operators) to render"
        )
    if time.monotonic() > budget.deadline:
        raise RenderTimeError(f"the template takes more than {budget.timeout_s:g} s to render")


def _max_chars() -> int:
    budget = _BUDGET.get()
    return budget.max_chars if budget is not None else DEFAULT_MAX_CHARS


def _produce(chars: int) -> None:
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.produced += chars
    if budget.produced > budget.max_chars:
        raise RenderLimitError(f"the template produces more than {budget.max_chars} characters (max_prompt_chars)")


def _size(value: Any) -> int:
    """Characters of a string, items of a list (0: anything else)."""
    return len(value) if isinstance(value, str | list | tuple | dict) else 0


def _fits(size: int, what: str) -> None:
    limit = _max_chars()
    if size > limit:
        raise RenderLimitError(f"{what} would be {size} long, over the prompt's bound of {limit} characters")


def _text_like(value: Any) -> bool:
    return isinstance(value, str | int | float | Placeholder | Undefined) or value is None


def _refuse_object(value: Any, where: str) -> None:
    if not _text_like(value):
        raise RenderError(
            f"the template {where} a {type(value).__name__}, which would reach the judge as its Python repr, not "
            "text: print variables as they are, e.g. {{ output }}"
        )


def _text(value: Any) -> str:
    return str(value)


# -- what the rewritten syntax tree calls ----------------------------------------------------------------------


@pass_context
def _finalize(context: Context, value: Any) -> Any:
    """Every piece of output, printed or captured (the template's own text too, see ``_Rewrite``): text, a number
    or a variable, counted. Taking the context keeps Jinja from folding constant output at compile time, past the
    count."""
    _step()
    _refuse_object(value, "prints")
    if isinstance(value, Placeholder):
        _produce(Placeholder.PRINTED_CHARS)
    elif isinstance(value, str):
        _produce(len(value))
    elif not isinstance(value, Undefined):
        _produce(len(str(value)))
    return value


@pass_context
def _loop(context: Context, iterable: Any) -> Iterator[Any]:
    """A loop's iterable, one step per iteration."""
    for item in iterable:
        _step()
        yield item


@pass_context
def _concat(context: Context, first: Any, *rest: Any) -> str:
    """``a ~ b``: text joined, counted before it is built."""
    _step()
    values = (first, *rest)
    for value in values:
        _refuse_object(value, "joins with ~")
    texts = [_text(value) for value in values]
    _fits(sum(len(t) for t in texts), "a text joined with ~")
    return "".join(texts)


# Filters the rewritten tree calls (called directly, as every filter is: no sandboxed call on the way); their names
# are not in FILTERS, so a template cannot name them itself.
_GUARDS: Final[dict[str, Callable[..., Any]]] = {"_loop": _loop, "_concat": _concat}


class _Rewrite(NodeTransformer):
    def visit_TemplateData(self, node: nodes.TemplateData) -> nodes.Node:
        # The template's own text as a constant: it goes through the finalize count as any output (text in a loop
        # repeats as often as the loop does).
        return nodes.Const(node.data, lineno=node.lineno)

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _guard_filter("_loop", [cast(nodes.Expr, node.iter)])
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        children = [self.visit(child) for child in node.nodes]
        return _guard_filter("_concat", [cast(nodes.Expr, child) for child in children])


def _guard_filter(name: str, args: list[nodes.Expr]) -> nodes.Filter:
    lineno = args[0].lineno if args[0].lineno else 1
    return nodes.Filter(args[0], name, args[1:], [], None, None, lineno=lineno)


def bounded_syntax(ast: nodes.Template, environment: BoundedSandbox) -> nodes.Template:
    """``ast`` with every loop, output and ``~`` counted (see the module doc), ready to compile."""
    rewritten = _Rewrite().visit(ast)
    assert isinstance(rewritten, nodes.Template)
    rewritten.set_environment(environment)
    return rewritten


# -- the environment ---------------------------------------------------------------------------------------------


def _guarded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` counted as a step, its value checked before it runs and its result after."""
    takes_first = getattr(function, "jinja_pass_arg", None) is not None  # a context or environment comes first

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _step()
        at = 1 if takes_first else 0
        value = args[at] if len(args) > at else None
        if name in _TEXT_FILTERS:
            _refuse_object(value, f"reads as text (filter {name})")
        if name == "join":
            items = value if isinstance(value, list | tuple | str) else list(value or ())
            separator = args[at + 1] if len(args) > at + 1 else kwargs.get("d", "")
            for item in items if not isinstance(items, str) else ():
                _refuse_object(item, "joins (filter join)")
            _fits(sum(len(_text(i)) for i in items) + len(_text(separator)) * len(items), "a joined text")
            args = (*args[:at], items, *args[at + 1 :])
        elif name == "replace" and isinstance(value, str):
            old, new = (_text(a) for a in [*args[at + 1 : at + 3], "", ""][:2])
            grows = max(0, len(new) - len(old)) * (value.count(old) if old else len(value) + 1)
            _fits(len(value) + grows, "a replaced text")
        elif name == "indent" and isinstance(value, str):
            width = args[at + 1] if len(args) > at + 1 else kwargs.get("width", 4)
            indent = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
            _fits(len(value) + (value.count("\n") + 1) * indent, "an indented text")
        result = function(*args, **kwargs)
        _fits(_size(result), f"the result of filter {name}")
        return result

    return guarded


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the bounds of the module doc."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals.pop("lipsum", None)  # paragraphs of lorem ipsum, as many as asked for: nothing a prompt needs
        self.filters = {name: _guarded_filter(name, f) for name, f in self.filters.items() if name in FILTERS}
        self.filters.update(_GUARDS)
        self.finalize = _finalize

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        _step()
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            if right * (abs(left).bit_length() - 1) > _MAX_INT_BITS:
                raise RenderLimitError(f"{left} ** {right} is a number of more than {_MAX_INT_BITS} bits")
        elif operator == "*":
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > _MAX_INT_BITS:
                    raise RenderLimitError(f"a product of more than {_MAX_INT_BITS} bits")
            elif isinstance(right, int) and _size(left):
                _fits(_size(left) * right, "a repeated value")
            elif isinstance(left, int) and _size(right):
                _fits(_size(right) * left, "a repeated value")
        elif operator == "+" and _size(left) and _size(right):
            _fits(_size(left) + _size(right), "a joined value")
        elif operator == "%" and isinstance(left, str):
            _check_percent_format(left, right)
        result = super().call_binop(context, operator, left, right)
        _fits(_size(result), "the result of an operator")
        return result

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _step()
        result = super().call(__context, __obj, *args, **kwargs)
        _fits(_size(result), "the result of a call")
        return result

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, str):
            return attr in _STR_METHODS
        if isinstance(obj, int | float):
            return False  # int.to_bytes(10**9) and the like: nothing a prompt needs
        return bool(super().is_safe_attribute(obj, attr, value))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        return None  # str.format is not among the string methods offered (its widths are unbounded)


def _check_percent_format(fmt: str, args: Any) -> None:
    """``'%0999999999d' % 1`` or ``'%*d' % (10**9, 1)``: widths and precisions bounded, and no object formatted
    as its repr."""
    for match in _FORMAT_NUMBER.finditer(fmt):
        for number in match.groups():
            if number is not None and number != "*" and int(number) > _MAX_WIDTH:
                raise RenderLimitError(f"a %-format width of {number}, over {_MAX_WIDTH}")
    values: Iterable[Any] = args if isinstance(args, tuple) else (args,)
    for value in values:
        if isinstance(value, int) and abs(value) > _MAX_WIDTH and "*" in fmt:
            raise RenderLimitError(f"a %-format width of {value}, over {_MAX_WIDTH}")
        if not isinstance(args, dict):
            _refuse_object(value, "formats with %")
