"""Which spans become scorer runs: span kinds, name filters, attribute predicates, sampling.

Everything here is cheap on purpose: it runs on every span of every record, before any attribute
dictionary is built.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any, Literal

from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from sidecar.core import names

__all__ = [
    "AttributePredicate",
    "NameFilter",
    "Selection",
    "SpanKind",
    "classify",
    "sample_score",
    "sampled_in",
]

SpanKind = Literal["agent", "inference"]
_TWO_48 = float(1 << 48)
_SELECTION_KEYS = frozenset(
    {names.GEN_AI_OPERATION_NAME, names.OPENINFERENCE_SPAN_KIND, names.MASTRA_SPAN_TYPE, names.SIDECAR_INTERNAL}
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NameFilter(_Frozen):
    """Glob patterns (``fnmatch``, case-sensitive). Empty ``include`` means everything is included."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def allows(self, name: str | None) -> bool:
        if self.include and (name is None or not any(fnmatchcase(name, p) for p in self.include)):
            return False
        return not (name is not None and any(fnmatchcase(name, p) for p in self.exclude))


class AttributePredicate(_Frozen):
    """A condition on a span attribute (resource attributes are not consulted)."""

    key: str
    op: Literal["equals", "not_equals", "exists", "absent"] = "equals"
    value: str | bool | int | float | None = None

    def holds(self, attributes: Mapping[str, Any]) -> bool:
        if self.op == "exists":
            return self.key in attributes
        if self.op == "absent":
            return self.key not in attributes
        equal = self.key in attributes and attributes[self.key] == self.value
        return equal if self.op == "equals" else not equal


class Selection(_Frozen):
    """Which spans to score. The defaults score every agent span of every service."""

    kinds: frozenset[SpanKind] = frozenset({"agent"})
    agents: NameFilter = NameFilter()  # matched against gen_ai.agent.name, else gen_ai.agent.id
    services: NameFilter = NameFilter()  # matched against resource service.name
    where: tuple[AttributePredicate, ...] = ()  # all must hold
    sample_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    max_input_bytes: int = Field(default=256 * 1024, gt=0)  # text content of one span; larger → too_large


def classify(attributes: Iterable[KeyValue]) -> tuple[SpanKind | None, bool]:
    """(kind, internal) from one pass over the span's attribute keys, without decoding values.

    ``internal`` marks the sidecar's own spans (loop guard).
    """
    kind: SpanKind | None = None
    internal = False
    for kv in attributes:
        key = kv.key
        # One set lookup per attribute: most spans are HTTP/DB spans with none of these keys.
        if key not in _SELECTION_KEYS:
            continue
        if key == names.GEN_AI_OPERATION_NAME:
            op = kv.value.string_value
            if op == names.OP_INVOKE_AGENT or op == names.MASTRA_LEGACY_OPERATION_AGENT_RUN:
                kind = "agent"
            elif op in names.INFERENCE_OPERATIONS and kind is None:
                kind = "inference"
        elif key == names.OPENINFERENCE_SPAN_KIND:
            oi = kv.value.string_value.upper()
            if oi == names.OI_KIND_AGENT:
                kind = "agent"
            elif oi == names.OI_KIND_LLM and kind is None:
                kind = "inference"
        elif key == names.MASTRA_SPAN_TYPE:
            if kv.value.string_value == names.MASTRA_AGENT_RUN:
                kind = "agent"
        else:  # names.SIDECAR_INTERNAL
            value = kv.value
            internal = value.bool_value or value.string_value.lower() == "true"
    return kind, internal


def sample_score(trace_id: bytes) -> float:
    """A trace's position in [0, 1): first 6 bytes of sha256(trace id bytes), big-endian, / 2^48.

    A trace is kept when ``sample_score(trace_id) < rate``; every replica agrees, and a lower rate
    keeps a subset of what a higher rate keeps.
    """
    return int.from_bytes(hashlib.sha256(trace_id).digest()[:6], "big") / _TWO_48


def sampled_in(rate: float, key: bytes) -> bool:
    """Whether sampling ``rate`` keeps ``key`` (a trace id, a conversation id): the one rule every stage applies."""
    return rate >= 1.0 or (rate > 0.0 and sample_score(key) < rate)
