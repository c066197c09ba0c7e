"""Which spans become scorer runs: span kinds, name filters, attribute predicates, sampling.

Everything here is cheap on purpose: it runs on every span of every record, before any attribute
dictionary is built.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any, Literal, NamedTuple

from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from sidecar.core import names

__all__ = [
    "AttributePredicate",
    "NameFilter",
    "Selection",
    "SpanClass",
    "SpanKind",
    "classify",
    "sample_score",
    "sampled_in",
]

SpanKind = Literal["agent", "inference"]
_TWO_48 = float(1 << 48)
_KIND_KEYS = frozenset(
    {
        names.GEN_AI_OPERATION_NAME,
        names.OPENINFERENCE_SPAN_KIND,
        names.MASTRA_SPAN_TYPE,
        names.LLM_REQUEST_TYPE,
        names.TRACELOOP_SPAN_KIND,
    }
)
# Keys only an LLM or agent span carries: a span with one of them and no kind a rule recognises is counted
# ``unrecognised``, never skipped without a word (the flattened legacy prompt always has its index 0).
_GENAI_MARKERS = frozenset(
    {
        names.GEN_AI_REQUEST_MODEL,
        names.GEN_AI_INPUT_MESSAGES,
        names.GEN_AI_OUTPUT_MESSAGES,
        names.GEN_AI_SYSTEM,
        names.GEN_AI_PROVIDER_NAME,
        names.LLM_MODEL_NAME,
        names.GEN_AI_PROMPT,
        names.GEN_AI_COMPLETION,
        f"{names.GEN_AI_PROMPT}.0.content",
        f"{names.GEN_AI_PROMPT}.0.role",
        f"{names.GEN_AI_COMPLETION}.0.content",
        f"{names.GEN_AI_COMPLETION}.0.role",
    }
)
_SELECTION_KEYS = _KIND_KEYS | _GENAI_MARKERS | {names.SIDECAR_INTERNAL}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NameFilter(_Frozen):
    """Glob patterns (``fnmatch``, case-sensitive). Empty ``include`` means everything is included."""

    include: tuple[str, ...] = ()  # globs a name must match one of; empty: every name
    exclude: tuple[str, ...] = ()  # globs a name must match none of

    def allows(self, name: str | None) -> bool:
        if self.include and (name is None or not any(fnmatchcase(name, p) for p in self.include)):
            return False
        return not (name is not None and any(fnmatchcase(name, p) for p in self.exclude))


class AttributePredicate(_Frozen):
    """A condition on a span attribute (resource attributes are not consulted)."""

    key: str  # the span attribute's key
    op: Literal["equals", "not_equals", "exists", "absent"] = "equals"  # how the attribute is tested
    value: str | bool | int | float | None = None  # compared with equals and not_equals

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


class SpanClass(NamedTuple):
    """What one pass over a span's attribute keys tells: its kind (``None``: not a run), whether it is the
    sidecar's own (loop guard), and whether it looks like an LLM or agent span that no rule recognises."""

    kind: SpanKind | None
    internal: bool
    unrecognised: bool


# Per convention key: value → kind (None: recognised, not a run). A value not listed is unrecognised.
_RULES: Mapping[str, Mapping[str, SpanKind | None]] = {
    names.GEN_AI_OPERATION_NAME: {
        names.OP_INVOKE_AGENT: "agent",
        names.MASTRA_LEGACY_OPERATION_AGENT_RUN: "agent",
        **{op: "inference" for op in names.INFERENCE_OPERATIONS},
        **dict.fromkeys(names.OTHER_OPERATIONS),
    },
    names.OPENINFERENCE_SPAN_KIND: {
        names.OI_KIND_AGENT: "agent",
        names.OI_KIND_LLM: "inference",
        **dict.fromkeys(names.OI_KINDS_OTHER),
    },
    names.LLM_REQUEST_TYPE: {
        **{kind: "inference" for kind in names.LLM_REQUEST_TYPES_INFERENCE},
        **dict.fromkeys(names.LLM_REQUEST_TYPES_OTHER),
    },
    names.TRACELOOP_SPAN_KIND: {
        **{kind: "agent" for kind in names.TRACELOOP_KINDS_AGENT},
        **dict.fromkeys(names.TRACELOOP_KINDS_OTHER),
    },
}


def classify(attributes: Iterable[KeyValue]) -> SpanClass:
    """The span's class from one pass over its attribute keys, decoding only the few values that name a kind.

    An agent marker wins over an inference one (an agent span may carry its model too); Mastra's span types other
    than ``agent_run`` are recognised, not runs.
    """
    kind: SpanKind | None = None
    internal = False
    recognised = False
    marked = False
    for kv in attributes:
        key = kv.key
        # One set lookup per attribute: most spans are HTTP/DB spans with none of these keys.
        if key not in _SELECTION_KEYS:
            continue
        if key == names.SIDECAR_INTERNAL:
            internal = kv.value.bool_value or kv.value.string_value.lower() == "true"
            continue
        if key in _GENAI_MARKERS:
            marked = True
            continue
        marked = True
        if key == names.MASTRA_SPAN_TYPE:
            recognised = True
            if kv.value.string_value == names.MASTRA_AGENT_RUN:
                kind = "agent"
            continue
        word = kv.value.string_value
        rule = _RULES[key]
        if key == names.OPENINFERENCE_SPAN_KIND:
            word = word.upper()
        if word not in rule:
            continue
        recognised = True
        found = rule[word]
        if found == "agent" or (found == "inference" and kind is None):
            kind = found
    return SpanClass(kind, internal, kind is None and marked and not recognised and not internal)


def sample_score(trace_id: bytes) -> float:
    """A trace's position in [0, 1): first 6 bytes of sha256(trace id bytes), big-endian, / 2^48.

    A trace is kept when ``sample_score(trace_id) < rate``; every replica agrees, and a lower rate
    keeps a subset of what a higher rate keeps.
    """
    return int.from_bytes(hashlib.sha256(trace_id).digest()[:6], "big") / _TWO_48


def sampled_in(rate: float, key: bytes) -> bool:
    """Whether sampling ``rate`` keeps ``key`` (a trace id, a conversation id): the one rule every stage applies."""
    return rate >= 1.0 or (rate > 0.0 and sample_score(key) < rate)
