"""Every scorer kind, prebuilt ones included: what settings, ``validate``, ``kinds`` and the docs read.

The registry (``sidecar.scorers.registry``) sits below the families, which import it to declare their
kinds; this module sits above them and imports the package first, so that every prebuilt kind is registered
before anyone lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from sidecar.core.runs import SCOPES
from sidecar.scorers.registry import NEED_ORDER, ScorerKind, registered_kinds

__all__ = ["kinds_table", "scorer_kinds"]


def scorer_kinds() -> Mapping[str, ScorerKind[Any]]:
    """Every registered kind by name (importing ``sidecar.scorers`` registers the prebuilt ones)."""
    import sidecar.scorers  # noqa: F401  (the prebuilt modules register themselves on import)

    return registered_kinds()


def kinds_table(kinds: Mapping[str, ScorerKind[Any]] | None = None) -> str:
    """The prebuilt kinds as a Markdown table (``scoring-sidecar kinds`` prints it; docs/scorers.md holds it)."""
    rows = [
        "| kind | what it scores | judge calls per run | needs | better | live | scopes | options (default) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    chosen = kinds if kinds is not None else {n: k for n, k in scorer_kinds().items() if k.prebuilt}
    for name, kind in sorted(chosen.items()):
        options = ", ".join(
            f"`{field}` ({'required' if info.is_required() else _default(info.default)})"
            for field, info in kind.options.model_fields.items()
        )
        needs = (
            ", ".join(need.replace("_", " ") for need in NEED_ORDER if need in kind.needs) or "what its options name"
        )
        calls = f"{kind.judge_calls_per_run:g}" if kind.needs_judge else "0 (code)"
        live = "eval only" if kind.eval_only else "yes"
        scopes = ", ".join(scope for scope in SCOPES if scope in kind.scopes)
        rows.append(
            f"| `{name}` | {kind.description} | {calls} | {needs} | {kind.direction} | {live} | {scopes} | "
            f"{options or '-'} |"
        )
    return "\n".join(rows)


def _default(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, BaseModel | dict | list | tuple):
        return "see its page"  # nested defaults (weights, penalties) are documented with the kind
    return str(value)
