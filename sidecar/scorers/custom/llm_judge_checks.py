"""What a judge's template is refused for by reading it alone, each problem with its template line: recursion, a
filter the sandbox does not offer, a Jinja global printed as it is. The rest is found by rendering it
(``llm_judge_template._check_renders``) within the sandbox's bounds (``llm_judge_sandbox``)."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from jinja2 import nodes

from sidecar.scorers.custom.llm_judge_sandbox import FILTERS

__all__ = ["static_problems"]

_WHY_NOT: dict[str, str] = {
    "pprint": "it sends Python reprs: print variables as they are, e.g. {{ output }}",
    "tojson": "it sends Python reprs: print variables as they are, e.g. {{ output }}",
    "random": "a run must get the same prompt every time it is scored",
    **dict.fromkeys(
        ("center", "wordwrap", "format", "batch", "slice", "sum", "filesizeformat", "urlize", "xmlattr", "urlencode"),
        "a judge's prompt has no use for it",
    ),
}


def static_problems(ast: nodes.Template, jinja_names: Collection[str]) -> Iterator[tuple[int | None, str]]:
    """(template line, message) for each problem found without rendering."""
    yield from _filters(ast)
    for node in ast.find_all(nodes.Name):
        if node.name == "self" and node.ctx == "load":
            yield node.lineno, "self (the template's own blocks) is not offered in a judge's template"
    for loop in ast.find_all(nodes.For):
        if loop.recursive:
            yield loop.lineno, "a recursive loop is refused in a judge's template: it recurses as deep as the data"
    yield from _macro_recursion(ast)
    yield from _printed_objects(ast, jinja_names)


def _filters(ast: nodes.Template) -> Iterator[tuple[int | None, str]]:
    seen: set[str] = set()
    for node in ast.find_all(nodes.Filter):
        if node.name in FILTERS or node.name in seen:
            continue
        seen.add(node.name)
        why = _WHY_NOT.get(node.name, f"offered: {', '.join(sorted(FILTERS))}")
        yield node.lineno, f"filter {node.name!r} is not offered in a judge's template ({why})"


def _macro_recursion(ast: nodes.Template) -> Iterator[tuple[int | None, str]]:
    """A macro that calls itself, directly or through others (a ``{% call %}`` block included): Python's recursion
    limit would end it, after thousands of frames of work."""
    macros = {macro.name: macro for macro in ast.find_all(nodes.Macro)}
    calls = {
        name: {
            call.node.name
            for call in macro.find_all(nodes.Call)
            if isinstance(call.node, nodes.Name) and call.node.name in macros
        }
        for name, macro in macros.items()
    }
    reported: set[str] = set()
    for start in macros:
        cycle = _cycle_from(start, calls)
        if cycle is not None and not reported & set(cycle):
            reported.update(cycle)
            path = " → ".join([*cycle, cycle[0]])
            yield (
                macros[start].lineno,
                f"macro {start!r} calls itself ({path}): recursion is refused in a judge's template",
            )


def _cycle_from(start: str, calls: dict[str, set[str]]) -> list[str] | None:
    """The macros of a path from ``start`` back to itself, or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    visited: set[str] = set()
    while stack:
        name, path = stack.pop()
        for callee in sorted(calls.get(name, ())):
            if callee == start:
                return path
            if callee not in visited:
                visited.add(callee)
                stack.append((callee, [*path, callee]))
    return None


def _printed_objects(ast: nodes.Template, jinja_names: Collection[str]) -> Iterator[tuple[int | None, str]]:
    """``{{ range }}``, ``{{ self }}``, ``{{ loop }}``, a macro's name: what prints as a Python repr."""
    objects = {*jinja_names, "self", "caller", *(m.name for m in ast.find_all(nodes.Macro))}
    for output in ast.find_all(nodes.Output):
        for child in output.nodes:
            if isinstance(child, nodes.Name) and child.ctx == "load" and child.name in objects:
                yield (
                    child.lineno,
                    f"{{{{ {child.name} }}}} prints a function or object (its Python repr), not text: call it, or "
                    "print a variable",
                )
