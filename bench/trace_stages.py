"""The whole-trace stages in process (``scope: trace``): the memory held per buffered trace (what the trace
buffer keeps of a 10-span trace while it waits, and what the ledger keeps of the 3 records that brought it),
and the CPU per trace of each stage: intake (decode the record, group its spans by trace), buffering,
decoding the buffered spans when the trace is ready, assembling its run (``trace_runs``).

``bench/e2e.py --only trace`` measures the sidecar's RSS draining a backlog, which depends on how full the
buffer gets meanwhile (intake against readiness, so the host's load); this bench holds ``--traces`` traces
at once, as a full buffer does, and reports the resident memory they add, per trace, with the buffer's
counted span bytes beside it. Traffic: ``bench/e2e_traces.py``'s traces (HTTP root, agent, LLM, tool,
retriever and database spans), each in 3 records keyed by its trace id.

    .venv/bin/python bench/trace_stages.py [--traces 20000]

The last line holds the figures as ``key=value`` pairs (``kb_per_trace``: resident KB per buffered trace;
``*_ms``: CPU ms per trace of each stage, ``stages_ms`` their sum).
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.e2e_traces import build_trace_pool
from sidecar.app.serve import tune_gc
from sidecar.conventions.selection import Selection
from sidecar.conventions.trace_runs import group_by_trace, trace_runs
from sidecar.ingest.pipeline import IngestConfig, read_record
from sidecar.runtime.claims import Claims
from sidecar.runtime.trace_buffer import BufferedTrace, TraceBuffer


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=int, default=20_000, help="traces held at once (the default max_traces)")
    args = parser.parse_args()
    pool = build_trace_pool(50)
    config = IngestConfig(topic="t")
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=3600, max_wait_s=3600)
    claims: Claims[int] = Claims()
    rng = random.Random(7)
    tune_gc()  # the service's collector settings
    before = rss_mb()
    cpu = {"intake": 0.0, "buffer": 0.0}
    offset = 0
    for i in range(args.traces):
        template = pool[i % len(pool)]
        trace_id = rng.randbytes(16)
        for data in template.records:
            # Made here, as a fetch makes it: a buffer that keeps the record keeps memory this counts.
            value = data.replace(template.trace_id, trace_id)
            started = time.process_time()
            read = read_record(value, config)
            assert read.traces is not None
            grouped = group_by_trace(read.traces, offset=offset, record=value)
            claim = claims.open(0, offset, len(value))
            assert claim is not None
            middle = time.process_time()
            for tid, spans in grouped.items():
                if buffer.add(0, offset, tid, spans, held=claim) == "buffered":
                    claim.take()
            claim.seal()
            cpu["buffer"] += time.process_time() - middle
            cpu["intake"] += middle - started
            offset += 1
    del read, grouped
    gc.collect()
    grown = rss_mb() - before
    per_trace_kb = grown * 1024 / args.traces
    counted = buffer.bytes / 2**20
    print(
        f"{args.traces} traces buffered ({offset} records held): RSS +{grown:.1f} MB, {per_trace_kb:.2f} KB per "
        f"trace; the buffer counts {counted:.1f} MB of span bytes"
    )
    started = time.process_time()
    ready = buffer.due()  # every trace: idle_s is an hour, max_wait_s too, but nothing is asked of readiness
    ready = ready or [(trace, "root_idle") for trace in list(_all(buffer))]
    cpu["due"] = time.process_time() - started
    started = time.process_time()
    decoded = [trace.decoded() for trace, _ in ready]
    cpu["decode"] = time.process_time() - started
    selection = Selection()
    started = time.process_time()
    runs = sum(len(trace_runs(spans, selection, ready_reason="root_idle").runs) for spans in decoded)
    cpu["assemble"] = time.process_time() - started
    assert runs == args.traces, runs
    per_trace = {name: 1000 * seconds / args.traces for name, seconds in cpu.items()}
    print("CPU per trace: " + ", ".join(f"{name} {ms:.4f} ms" for name, ms in per_trace.items()))
    figures = " ".join(f"{name}_ms={ms:.4f}" for name, ms in per_trace.items())
    print(
        f"traces={args.traces} rss_mb={grown:.1f} kb_per_trace={per_trace_kb:.2f} counted_mb={counted:.1f} "
        f"{figures} stages_ms={sum(per_trace.values()):.4f}"
    )


def _all(buffer: TraceBuffer[int]) -> list[BufferedTrace[int]]:
    taken = []
    while (trace := buffer.take_oldest()) is not None:
        taken.append(trace)
    return taken


if __name__ == "__main__":
    main()
