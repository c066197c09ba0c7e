"""The command line's options: one subcommand each, with what ``--help`` says of it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sidecar import __version__

if TYPE_CHECKING:  # the settings module imports pydantic and the scorer library: not for --help
    pass

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scoring-sidecar",
        description="Score AI agents' OpenTelemetry traces from Kafka with LLM judges and code scorers; export "
        "the scores as Prometheus metrics, OTel spans and Kafka records. Start with `scoring-sidecar demo` (no "
        "services, no API key).",
        epilog="Exit codes: 0 success; 1 a runtime failure (or, for eval, a threshold breached; for backfill, a "
        "window not finished); 2 an invalid configuration, dataset or option (run: also a metrics port that cannot "
        "be bound; backfill, compare: also a topic that does not exist or a window past retention); 3 run: the stop "
        "overran runtime.shutdown_timeout_s; eval: runs failed (--allow-failures: 0); 4 run, backfill, compare: the "
        "Kafka broker unreachable.",
    )
    parser.add_argument("--version", action="version", version=f"scoring-sidecar {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="the embedded default: broker, synthetic agent traffic and the real service (no API key needed)",
        description="Start an embedded Kafka-compatible broker, produce synthetic agent traces through it and "
        "score them with the real service (prompt alignment, answer relevancy, toxicity, tool-call accuracy, "
        "completeness; on multi-turn conversations the conversation judges), printing a live summary. Without "
        "--judge-model or OPENAI_API_KEY the judge is a local "
        "stand-in heuristic, not a language model. --serve leaves the service out, for `scoring-sidecar run` in "
        "another terminal.",
    )
    demo.add_argument(
        "--judge-model",
        help="a litellm model id (e.g. openai/gpt-4o-mini); default: gpt-4o-mini with "
        "OPENAI_API_KEY, else the local stand-in",
    )
    demo.add_argument("--api-base", help="the judge's API base URL (OpenAI-compatible servers)")
    demo.add_argument(
        "--duration", type=float, metavar="SECONDS", help="stop by itself after this long (default: until Ctrl-C)"
    )
    demo.add_argument("--rate", type=float, default=5.0, help="traces produced per second (default 5)")
    demo.add_argument(
        "--max-records",
        type=int,
        default=3000,
        help="stop producing after this many traces: the in-memory broker keeps every record (default 3000)",
    )
    demo.add_argument("--metrics-port", type=int, default=9464, help="/metrics port (default 9464; 0: a free port)")
    demo.add_argument("--metrics-host", default="127.0.0.1", help="/metrics host (default 127.0.0.1)")
    demo.add_argument("--otlp-endpoint", help="export scorer-run spans to this OTLP receiver (http://host:4317)")
    demo.add_argument("--otlp-protocol", choices=("grpc", "http/protobuf"), default="grpc")
    demo.add_argument("--interval", type=float, default=5.0, metavar="SECONDS", help="summary period (default 5)")
    demo.add_argument(
        "--spend-cap", type=float, default=1.0, metavar="USD", help="real judges: estimated USD per hour (default 1)"
    )
    serve = demo.add_mutually_exclusive_group()
    serve.add_argument(
        "--serve",
        action="store_true",
        help="run the broker, the judge and the traffic without the in-process service, and write a configuration "
        "for `scoring-sidecar run --config FILE` in another terminal (the real service, no Docker)",
    )
    serve.add_argument(
        "--print-config",
        action="store_true",
        help="print that configuration (broker and judge as ${KAFKA_BOOTSTRAP_SERVERS} and ${JUDGE_API_BASE}) and exit",
    )
    demo.add_argument(
        "--config-out",
        metavar="FILE",
        help="with --serve: where to write the configuration (default: sidecar.yaml in a new private directory under "
        "the temporary directory, removed at the stop)",
    )
    evaluate = commands.add_parser(
        "eval",
        help="score a dataset offline with the configured scorers; exit 1 when a threshold is breached, 3 when runs "
        "failed",
        description="Score every item of DATASET (JSONL or CSV: input, output, ground_truth, request_context, "
        "expected) with the scorers of the configuration file and print a summary table. Exit 0: every run scored "
        "(or not scorable) and every threshold holds; 1: a scorer's average (normalised by its scale) falls outside "
        "its threshold, or its agreement with the items' expected verdicts (a person's) is under --min-agreement; 2: "
        "invalid configuration, dataset or thresholds (nothing scored); 3: runs failed (the judge refused, timed out "
        "or answered out of shape), so the averages leave items out (--allow-failures: 0).",
    )
    evaluate.add_argument("dataset", metavar="DATASET", help="a .jsonl or .csv file (with --records: OTLP records)")
    evaluate.add_argument(
        "--records",
        action="store_true",
        help="DATASET is a file of OTLP records (OTLP/JSON lines, or one protobuf export, as preview --file reads): "
        "every run each scorer's stage finds in them is scored, as the service would score it",
    )
    evaluate.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration (kafka optional)")
    evaluate.add_argument("--output", metavar="FILE", help="write every result as JSON lines (score records)")
    evaluate.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="ID=MIN[:MAX]",
        help="bounds in [0, 1] on a scorer's average score / scale (repeatable; ID=:MAX for a maximum only)",
    )
    evaluate.add_argument(
        "--thresholds", metavar="FILE", help="YAML: scorer id -> MIN or {min, max} (--threshold overrides)"
    )
    evaluate.add_argument(
        "--min-agreement",
        type=float,
        metavar="SHARE",
        help="exit 1 when a scorer agrees with the items' expected verdicts (a person's) on less than this share of "
        "them (the CI gate for a judge's change; docs/feedback.md)",
    )
    evaluate.add_argument(
        "--agree-within",
        type=float,
        default=0.2,
        metavar="D",
        help="a number agrees with an expected number within D on the 0–1 scale (default 0.2)",
    )
    evaluate.add_argument("--concurrency", type=int, default=8, help="scorer runs in flight (default 8)")
    evaluate.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 although runs failed (thresholds still apply to the runs that scored)",
    )
    evaluate.add_argument(
        "--stand-in-judge",
        action="store_true",
        help="judge with the local stand-in heuristic (not a language model) instead of the configured judges",
    )
    bar = evaluate.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_const", const=True, help="always draw the bar")
    bar.add_argument("--no-progress", dest="progress", action="store_const", const=False, help="no progress output")
    run = commands.add_parser(
        "run",
        help="consume traces from Kafka and score them until SIGTERM",
        description="Run the service: consume OTLP traces from the configured Kafka topics, score the selected "
        "spans, export scores (metrics on /metrics, spans over OTLP, records to Kafka) and commit offsets only "
        "behind the exports. SIGTERM or Ctrl-C drains, flushes, commits and exits 0. A broker not reachable at "
        "start-up is retried for kafka.startup_timeout_s (/readyz says why), then exit 4.",
    )
    run.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration file")
    run.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="/metrics, /healthz and /readyz port (overrides exporters.prometheus.port and enables it; 0: a free port)",
    )
    run.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes (overrides runtime.workers; one core each, all in the consumer group)",
    )
    # Set by the supervisor for its worker processes, not by users.
    run.add_argument("--worker", help=argparse.SUPPRESS)
    run.add_argument("--metrics-socket", help=argparse.SUPPRESS)
    _add_preview(commands)
    _add_backfill(commands)
    _add_compare(commands)
    _add_corrections(commands)
    commands.add_parser(
        "kinds",
        help="list the prebuilt scorer kinds (judge, live or eval only, options with defaults)",
        description="List the scorer kinds a configuration can name under scorers[].kind (Markdown table).",
    )
    commands.add_parser(
        "config-reference",
        help="print the configuration reference (every key, its type, default and what it does; Markdown)",
        description="Print the configuration reference generated from the settings models: docs/configuration.md.",
    )
    validate = commands.add_parser(
        "validate",
        help="check a configuration file (and build its scorers); exit 0 or 2",
        description="Check a configuration file: every problem with its key and line; build every scorer and "
        "check that each calls only declared judges. A file without `kafka` is checked as an eval "
        "configuration. Exit 0 when valid, 2 otherwise.",
    )
    validate.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration file")
    validate.add_argument(
        "--traffic",
        metavar="RATE",
        help="also estimate judge calls and cost at this trace rate (e.g. 50/s, 3000/min)",
    )
    validate.add_argument(
        "--call-tokens",
        default="1500/300",
        metavar="IN/OUT",
        help="input/output tokens per judge call for the cost estimate (default 1500/300)",
    )
    validate.add_argument(
        "--turns-per-conversation",
        type=float,
        default=5.0,
        metavar="N",
        help="for the cost estimate of scope: session scorers: traces (turns) per conversation, each conversation "
        "scored once with every turn in its prompt (default 5)",
    )
    return parser


def _add_window(command: argparse.ArgumentParser) -> None:
    """``--config``, ``--from`` and ``--to``: the configuration of ``run`` and a past window of a topic (backfill,
    compare)."""
    command.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration file of `run`")
    command.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="TIME",
        help="the window's start: ISO 8601 with a zone (2026-11-24T00:00:00Z) or relative to now (-7d, -36h, -90m)",
    )
    command.add_argument("--to", dest="end", metavar="TIME", help="the window's end, exclusive (default: now)")


def _add_compare(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compare = commands.add_parser(
        "compare",
        help="compare an agent's versions on one scorer over a window of the score topic (a release review)",
        description="Read the score records of the score topic between --from and --to (without a consumer group), "
        "feed them in order to the version comparison the live service keeps, and print it for one agent and "
        "scorer: runs and mean score per version, then its newest version against its reference (the runs read, "
        "the means, the difference with its anytime-valid bounds, the verdict: -1 regression, 0 undecided, +1 "
        "improvement). Exit 2: invalid options or configuration, an unknown scorer, a topic that does not exist, a "
        "window past retention or over --max-records; 4: the broker unreachable. docs/versions.md.",
    )
    _add_window(compare)
    compare.add_argument("--agent", required=True, metavar="NAME", help="the agent (its gen_ai.agent.name)")
    compare.add_argument("--scorer", required=True, metavar="ID", help="a scorer of the configuration")
    compare.add_argument("--topic", metavar="TOPIC", help="the score topic (default: exporters.kafka_scores.topic)")
    compare.add_argument(
        "--max-records",
        type=int,
        metavar="N",
        help="refuse a window holding more records of the topic than this (default 1000000; about 250 bytes each)",
    )
    compare.add_argument(
        "--include-backfill", action="store_true", help="also read a backfill's scores (scoreSource backfill)"
    )
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")


def _add_backfill(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backfill = commands.add_parser(
        "backfill",
        help="score a past window of the traces topic with chosen scorers, then stop (resumable)",
        description="Score the records the traces topic holds between --from and --to (the broker's time index) with "
        "the chosen scorers of the configuration, through the same pipeline, judge gates and exporters as `run`, "
        "under the same score ids (a backfilled score replaces the live one; its record says scoreSource "
        '"backfill"). Prints the records per partition and an estimate of the judge calls, tokens and cost, asks '
        "for confirmation unless --yes, shows progress, and exits 0 once the window is scored and committed. The "
        "same command again continues where it stopped (its own consumer group). Exit 1: stopped before the end "
        "(run it again) or not confirmed; 2: invalid options, configuration, a topic that does not exist or a "
        "window past the topic's retention; 4: the broker unreachable. docs/backfill.md.",
    )
    _add_window(backfill)
    backfill.add_argument(
        "--scorer",
        dest="scorers",
        action="append",
        default=[],
        metavar="ID",
        help="a scorer of the configuration to run (repeatable; default: every configured scorer)",
    )
    backfill.add_argument("--yes", action="store_true", help="start without asking for confirmation")
    backfill.add_argument(
        "--judge-share",
        type=float,
        metavar="F",
        help="the share of each judge's configured max_concurrency, rpm, tpm and spend cap the backfill may use "
        "(default 0.25: the live service keeps the rest)",
    )
    backfill.add_argument(
        "--judge-concurrency", type=int, metavar="N", help="judge calls in flight per judge (overrides the share)"
    )
    backfill.add_argument(
        "--spend-cap",
        type=float,
        metavar="USD",
        help="estimated USD per hour per judge (overrides the share of the judge's cap); at the cap runs wait",
    )
    backfill.add_argument(
        "--sample-runs",
        type=int,
        default=5,
        metavar="N",
        help="runs per judged scorer scored before the estimate to measure its tokens per call (default 5; they are "
        "not exported; 0: assume --call-tokens)",
    )
    backfill.add_argument(
        "--sample-records",
        type=int,
        default=200,
        metavar="N",
        help="records of the window read to count the runs per record (default 200)",
    )
    backfill.add_argument(
        "--call-tokens",
        default="1500/300",
        metavar="IN/OUT",
        help="tokens per judge call assumed where none were measured (default 1500/300)",
    )
    backfill.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help='serve the backfill\'s metrics (every series labelled mode="backfill") on this port (0: a free port)',
    )
    bar = backfill.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_const", const=True, help="always draw the bar")
    bar.add_argument(
        "--no-progress", dest="progress", action="store_const", const=False, help="a progress line every 30 s"
    )


def _add_corrections(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    corrections = commands.add_parser(
        "corrections",
        help="a window's disagreements between a judge in YAML and people, as its examples_file for review",
        description="Read the feedback pairs topic over a window (no consumer group, nothing committed), keep the "
        "scorer's pairs where judge and person disagree, rebuild each one's run from the traces topic, and write "
        "them as JSONL of input, output, expected verdict and reason: the llm-judge's examples_file, for a person to "
        "review and commit (docs/feedback.md). Exit 0: written (even none); 2: invalid configuration, option, topic "
        "or window; 4: the broker unreachable.",
    )
    corrections.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration of the service")
    corrections.add_argument("--scorer", required=True, metavar="ID", help="the judge written in YAML (kind llm-judge)")
    corrections.add_argument(
        "--from", dest="start", required=True, metavar="TIME", help="the window's start (as backfill: -7d, ISO 8601)"
    )
    corrections.add_argument("--to", dest="end", metavar="TIME", help="the window's end, exclusive (default: now)")
    corrections.add_argument("--output", "-o", metavar="FILE", help="write the JSONL here (default: stdout)")
    corrections.add_argument(
        "--lookback",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="how long before its score a run's trace may have been written (default 3600)",
    )
    corrections.add_argument("--all", action="store_true", help="every pair, not only the disagreements")


def _add_preview(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    preview = commands.add_parser(
        "preview",
        help="try one scorer on recent runs: prompt, judge answer, score, label, cost; nothing exported or committed",
        description="Read the newest agent runs (from the configured topic without joining the consumer group or "
        "committing, from a file of OTLP records, or from an eval dataset), render the scorer's prompt for each, call "
        "its judge, and print per run the scored span, the prompt (traced content shortened), the judge's answer, the "
        "score, label and reason, tokens and cost; then the distribution. Nothing is exported, nothing committed. "
        "Exit 0: runs shown; 1: none found; 2: invalid configuration, option or source.",
    )
    preview.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration")
    preview.add_argument("--scorer", required=True, metavar="ID", help="the scorer to try (its id under scorers)")
    source = preview.add_mutually_exclusive_group()
    source.add_argument("--from-topic", action="store_true", help="the configured topics' newest records (default)")
    source.add_argument("--file", metavar="OTLP_FILE", help="OTLP/JSON lines, or one OTLP protobuf export")
    source.add_argument("--dataset", metavar="EVAL_DATASET", help="an eval dataset (.jsonl or .csv)")
    preview.add_argument("-n", type=int, default=5, metavar="N", help="runs to preview (default 5)")
    preview.add_argument(
        "--show-prompt-only", action="store_true", help="render the prompts without calling a judge (no cost)"
    )
    preview.add_argument(
        "--stand-in-judge",
        action="store_true",
        help="judge with the local stand-in heuristic (not a language model) instead of the configured judges",
    )
    preview.add_argument(
        "--max-chars", type=int, default=300, metavar="N", help="traced content shown per quoted piece (default 300)"
    )
