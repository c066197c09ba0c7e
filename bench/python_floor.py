"""The least a Python consumer can do to score a trace with content similarity: ``bench/e2e.py``'s floor.

Per record: parse the OTLP request, find the agent spans (the sidecar's ``classify``), read their
attributes, take the input and output texts of the two conventions the bench traffic uses (GenAI JSON
messages, OpenInference flattened messages), score them with the Dice coefficient and encode a JSON
record. No models, no metrics, no spans, no produce, no commit, no error handling: every part of it is
also in the sidecar, which does much more. Its rate against a raw consume bounds what any Python
implementation of the same work can reach on the machine (``floor_ratio``).

    .venv/bin/python bench/python_floor.py   # in-process rates over the e2e traffic, no broker
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pydantic_core

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.conventions.attributes import attributes_dict
from sidecar.conventions.selection import classify
from sidecar.scorers.string_similarity import compare_two_strings


def _texts(attributes: Mapping[str, Any], *, output: bool) -> str:
    key = "gen_ai.output.messages" if output else "gen_ai.input.messages"
    if key in attributes:
        messages = json.loads(attributes[key])
        return ", ".join(p.get("content", "") for m in messages for p in m["parts"] if p.get("type") == "text")
    prefix = "llm.output_messages." if output else "llm.input_messages."
    return ", ".join(v for k, v in attributes.items() if k.startswith(prefix) and k.endswith(".content"))


def bare_score_records(data: bytes) -> list[bytes]:
    """One JSON score record per agent span of an OTLP protobuf export request."""
    records = []
    for resource_spans in ExportTraceServiceRequest.FromString(data).resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if classify(span.attributes)[0] != "agent":
                    continue
                attributes = attributes_dict(span.attributes)
                text_in = _texts(attributes, output=False).lower()
                text_out = _texts(attributes, output=True).lower()
                trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
                score_id = hashlib.sha256(f"{trace_id}{span_id}content-similarity".encode()).hexdigest()[:32]
                record = {
                    "scoreId": score_id,
                    "traceId": trace_id,
                    "spanId": span_id,
                    "score": compare_two_strings(text_in, text_out),
                }
                records.append(pydantic_core.to_json(record))
    return records


def _rate(pool: list[bytes], work: Callable[[bytes], object], rounds: int = 5) -> float:
    best = 0.0
    for _ in range(rounds):
        started = time.process_time()
        for data in pool:
            work(data)
        best = max(best, len(pool) / (time.process_time() - started))
    return best


def main() -> None:
    from bench.e2e_harness import build_pool
    from sidecar.ingest.pipeline import IngestConfig, read_record
    from sidecar.runtime.configured import ConfiguredScorer
    from sidecar.runtime.stages.span import SpanAssembly
    from sidecar.scorers import create_content_similarity_scorer

    pool = [template.data for template in build_pool(300)]
    config = IngestConfig(topic="t")
    span_scope = SpanAssembly([ConfiguredScorer(create_content_similarity_scorer())])

    def ingest_one(data: bytes) -> object:
        traces = read_record(data, config).traces
        return span_scope.of_record(traces) if traces is not None else None

    parse = _rate(pool, ExportTraceServiceRequest.FromString)
    floor = _rate(pool, bare_score_records)
    ingest = _rate(pool, ingest_one)
    print(f"FromString: {parse:,.0f} traces/s per core of CPU")
    print(f"bare Python scoring (this module): {floor:,.0f} traces/s")
    print(f"the sidecar's ingest alone (decode, select, map): {ingest:,.0f} traces/s")
    print(f"parse_per_s={parse:.0f} floor_per_s={floor:.0f} ingest_per_s={ingest:.0f}")


if __name__ == "__main__":
    main()
