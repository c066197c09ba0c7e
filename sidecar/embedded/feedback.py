"""Human labels in the demo (docs/feedback.md): a reviewer who labels some of the synthetic traces as a labelling
tool would (records on the feedback topic, keyed by trace id), so that the feedback join, the judge–human agreement
gauges and the dashboard's "Can the scores be trusted" row show data.

The reviewer reads the trace's intended quality (the traffic generator's ``excellent``, ``partial``, ``poor``) and
labels prompt alignment as a boolean (aligned or not) and answer relevancy as a number; one label in four is the
opposite on purpose, so the stand-in judge (word rules) and the people disagree now and then, as they do."""

from __future__ import annotations

from typing import Any

from sidecar.embedded.traffic import GeneratedTrace

__all__ = ["LABEL_EVERY", "human_labels"]

LABEL_EVERY = 2  # one trace in this many is labelled
_RELEVANCE = {"excellent": 0.9, "partial": 0.6, "poor": 0.2}


def human_labels(trace: GeneratedTrace, n: int) -> list[dict[str, Any]]:
    """The labels of the ``n``-th trace produced (none for most), one object per feedback record."""
    if n % LABEL_EVERY:
        return []
    contrary = (n // LABEL_EVERY) % 4 == 3  # one in four disagrees on purpose
    aligned = trace.quality != "poor"
    relevance = _RELEVANCE.get(trace.quality, 0.5)
    base = {"traceId": trace.trace_id, "spanId": trace.agent_span_id, "source": "human", "author": "demo-reviewer"}
    return [
        {**base, "name": "prompt-alignment", "value": aligned != contrary},
        {
            **base,
            "name": "answer-relevancy",
            "value": round(1.0 - relevance, 2) if contrary else relevance,
            "comment": "deliberately contrary (the demo's reviewer)" if contrary else None,
        },
    ]
