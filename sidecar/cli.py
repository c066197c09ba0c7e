"""``scoring-sidecar``: the command line."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sidecar import __version__

if TYPE_CHECKING:  # the settings module imports pydantic and the scorer library: not for --help
    from sidecar.scoring import Scorer
    from sidecar.settings import EvalSettings, SettingsError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scoring-sidecar",
        description="Score AI agents' OpenTelemetry traces from Kafka with LLM judges and code scorers; export "
        "the scores as Prometheus metrics, OTel spans and Kafka records. Start with `scoring-sidecar demo` (no "
        "services, no API key).",
        epilog="Exit codes: 0 success; 1 a runtime failure (or, for eval, a threshold breached; for backfill, a "
        "window not finished); 2 an invalid configuration, dataset or option (run: also a metrics port that cannot "
        "be bound; backfill: also a topic that does not exist or a window past retention); 3 run: the stop "
        "overran runtime.shutdown_timeout_s; eval: runs failed (--allow-failures: 0); 4 run, backfill: the Kafka "
        "broker unreachable.",
    )
    parser.add_argument("--version", action="version", version=f"scoring-sidecar {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="the embedded default: broker, synthetic agent traffic and the real service (no API key needed)",
        description="Start an embedded Kafka-compatible broker, produce synthetic agent traces through it and "
        "score them with the real service (prompt alignment, answer relevancy, toxicity, tool-call accuracy, "
        "completeness), printing a live summary. Without --judge-model or OPENAI_API_KEY the judge is a local "
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
        help="with --serve: where to write the configuration (default: scoring-sidecar-demo.yaml in the temporary "
        "directory)",
    )
    evaluate = commands.add_parser(
        "eval",
        help="score a dataset offline with the configured scorers; exit 1 when a threshold is breached, 3 when runs "
        "failed",
        description="Score every item of DATASET (JSONL or CSV: input, output, ground_truth, request_context) with "
        "the scorers of the configuration file and print a summary table. Exit 0: every run scored (or not "
        "scorable) and every threshold holds; 1: a scorer's average (normalised by its scale) falls outside its "
        "threshold; 2: invalid configuration, dataset or thresholds (nothing scored); 3: runs failed (the judge "
        "refused, timed out or answered out of shape), so the averages leave items out (--allow-failures: 0).",
    )
    evaluate.add_argument("dataset", metavar="DATASET", help="a .jsonl or .csv file")
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
    commands.add_parser(
        "kinds",
        help="list the prebuilt scorer kinds (judge, live or eval only, options with defaults)",
        description="List the scorer kinds a configuration can name under scorers[].kind (Markdown table).",
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
    return parser


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
    backfill.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration file of `run`")
    backfill.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="TIME",
        help="the window's start: ISO 8601 with a zone (2026-11-24T00:00:00Z) or relative to now (-7d, -36h, -90m)",
    )
    backfill.add_argument("--to", dest="end", metavar="TIME", help="the window's end, exclusive (default: now)")
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


def _preview(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    from sidecar.preview import PreviewOptions, parse_source
    from sidecar.preview import main as preview_main

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    source, path = parse_source(args.file, args.dataset)
    options = PreviewOptions(
        config=Path(args.config),
        scorer=args.scorer,
        source=source,
        path=path,
        n=args.n,
        show_prompt_only=args.show_prompt_only,
        stand_in=args.stand_in_judge,
        max_chars=args.max_chars,
    )
    return preview_main(options)


def _guarded(command: str, action: Callable[[], int]) -> int:
    """Run a command: an expected failure ends in its one line and exit status, a traceback means a bug."""
    from sidecar.runtime.startup import StartupFailure

    try:
        return action()
    except StartupFailure as exc:
        print(f"scoring-sidecar {command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception:
        import traceback

        traceback.print_exc()
        print(
            f"scoring-sidecar {command}: the error above is a bug in scoring-sidecar {__version__}, not in your "
            "configuration: please report it to its maintainers with this traceback",
            file=sys.stderr,
        )
        return 1


def _invalid(config: str, error: SettingsError) -> int:
    """Print every problem of an invalid configuration (key, line, message); the exit status 2."""
    print(f"config INVALID: {config}", file=sys.stderr)
    for problem in error.problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def _validate(args: argparse.Namespace) -> int:
    """Load the settings and build every scorer; print a verdict. 0: valid, 2: invalid.

    A file without ``kafka`` is checked as an ``eval`` configuration (``run`` would need one)."""
    from pathlib import Path

    from sidecar.app.scorer_factory import build_scorers
    from sidecar.settings import Settings, SettingsError, load_settings_as_written

    path = Path(args.config)
    try:
        settings = load_settings_as_written(path)  # with a kafka block, the live service's checks too
        scorers = build_scorers(settings)
    except SettingsError as exc:
        return _invalid(args.config, exc)
    ids = ", ".join(s.id for s in settings.scorers)
    judges = ", ".join(settings.judges) or "none"
    from sidecar.core.wording import counted

    counts = f"{counted(len(settings.scorers), 'scorer')} ({ids}), {counted(len(settings.judges), 'judge')} ({judges})"
    if args.traffic is not None:
        estimate = _cost_estimate(settings, scorers, args.traffic, args.call_tokens)
        if estimate is None:
            return 2
    from sidecar.app.judge_keys import judges_without_key

    if settings.kafka is None:
        print(f"config OK for eval: {counts}; no kafka section, which `run` needs")
    else:
        print(f"config OK: {counts}, topics ({', '.join(settings.kafka.topics)})")
    if args.traffic is not None:
        print(estimate)
    for problem in judges_without_key(settings):  # in this environment: where it runs, the key may be set
        print(f"  warning: {problem} (in this environment)", file=sys.stderr)
    from sidecar.app.config_warnings import rubrics_without_criteria

    for problem in rubrics_without_criteria(settings):
        print(f"  warning: {problem}", file=sys.stderr)
    if settings.kafka is None:
        return 0
    if settings.runtime.workers > 1 and isinstance(settings, Settings):
        from sidecar.app.supervisor import limits_below_worker_count

        for problem in limits_below_worker_count(settings):
            print(f"  warning: {problem}", file=sys.stderr)
    return 0


def _cost_estimate(settings: EvalSettings, scorers: dict[str, Scorer], traffic: str, call_tokens: str) -> str | None:
    from sidecar.app.cost_estimate import estimate_costs, parse_traffic, render_costs

    try:
        rate = parse_traffic(traffic)
        tokens_in, _, tokens_out = call_tokens.partition("/")
        input_tokens, output_tokens = int(tokens_in), int(tokens_out)
    except ValueError as exc:
        print(
            f"validate: {exc}" if "--traffic" in str(exc) else "validate: --call-tokens reads IN/OUT, e.g. 1500/300",
            file=sys.stderr,
        )
        return None
    rows = estimate_costs(settings, scorers, traces_per_s=rate, input_tokens=input_tokens, output_tokens=output_tokens)
    caps = {
        judge.to_judge_model().litellm_model: (judge.spend_cap_usd_per_hour, judge.on_spend_cap)
        for judge in settings.judges.values()
        if judge.spend_cap_usd_per_hour is not None
    }
    return render_costs(rows, traces_per_s=rate, input_tokens=input_tokens, output_tokens=output_tokens, caps=caps)


def _worker_position(value: str) -> tuple[int, int]:
    index, _, count = value.partition("/")
    position = int(index), int(count)
    if not 0 <= position[0] < position[1]:
        raise ValueError(value)
    return position


def _run(args: argparse.Namespace) -> int:
    """Load the settings, then serve until SIGTERM/SIGINT. 0: clean stop, 2: invalid configuration (or a metrics
    port that cannot be bound), 3: the stop overran ``runtime.shutdown_timeout_s`` (ended by its watchdog, or a
    worker killed by its supervisor), 4: the broker unreachable for ``kafka.startup_timeout_s``.

    With more than one worker this process supervises worker processes (``sidecar.app.supervisor``);
    each worker is this same command with ``--worker INDEX/COUNT``.
    """
    # A worker's parent is its supervisor: noted before anything slow (a supervisor already gone by then
    # closed the worker's stdin too, which the worker reads as soon as it runs).
    supervisor_pid = os.getppid() if args.worker is not None else None
    import logging
    from pathlib import Path

    from sidecar.settings import SettingsError, load_settings

    try:
        settings = load_settings(Path(args.config))
    except SettingsError as exc:
        return _invalid(args.config, exc)
    if args.workers is not None:
        if not 1 <= args.workers <= 64:
            print("run: --workers must be between 1 and 64", file=sys.stderr)
            return 2
        settings = settings.model_copy(
            update={"runtime": settings.runtime.model_copy(update={"workers": args.workers})}
        )
    if args.metrics_port is not None:
        if not 0 <= args.metrics_port <= 65535:
            print("run: --metrics-port must be between 0 and 65535", file=sys.stderr)
            return 2
        exporters = settings.exporters
        prometheus = exporters.prometheus.model_copy(update={"enabled": True, "port": args.metrics_port})
        settings = settings.model_copy(update={"exporters": exporters.model_copy(update={"prometheus": prometheus})})
    who = ""
    if args.worker is not None:
        from sidecar.app.worker_share import settings_for_worker

        index, count = _worker_position(args.worker)
        settings = settings_for_worker(settings, index, count)
        who = f"worker={index} pid=%(process)d "
    logging.basicConfig(
        level=settings.log_level.upper(),
        format=f"%(asctime)s %(levelname)s {who}%(name)s %(message)s",
        stream=sys.stderr,
    )
    if args.worker is None:  # once per pod: workers are this command again
        from sidecar.app.judge_keys import judges_without_key

        for problem in judges_without_key(settings):
            logging.getLogger("sidecar.app.serve").warning(
                "%s: its calls will be refused (401) and the judge paused, holding its scorers' runs; set the key "
                "and restart",
                problem,
            )
    if args.worker is None and settings.runtime.workers > 1:
        from sidecar.app.scorer_factory import build_scorers
        from sidecar.app.supervisor import supervise

        try:  # here, once: a scorer that cannot be built fails the pod at start, not as a worker crash loop
            build_scorers(settings)
        except SettingsError as exc:
            return _invalid(args.config, exc)
        return supervise(settings, Path(args.config))
    from sidecar.app.serve import serve

    return serve(settings, metrics_socket=args.metrics_socket, supervisor_pid=supervisor_pid)


def _backfill(args: argparse.Namespace) -> int:
    """A past window. 0: scored to its end; 1: stopped before (run it again) or not confirmed; 2: invalid
    options, configuration, missing topic or a window past retention; 4: the broker unreachable."""
    import logging
    from pathlib import Path

    from sidecar.backfill import DEFAULT_JUDGE_SHARE, BackfillOptions, JudgeBudget, run_backfill
    from sidecar.settings import SettingsError, load_settings

    try:
        settings = load_settings(Path(args.config))
    except SettingsError as exc:
        return _invalid(args.config, exc)
    share = DEFAULT_JUDGE_SHARE if args.judge_share is None else args.judge_share
    problems = [
        "--judge-share must be in (0, 1]" if not 0 < share <= 1 else "",
        "--judge-concurrency must be at least 1"
        if args.judge_concurrency is not None and args.judge_concurrency < 1
        else "",
        "--spend-cap must be > 0" if args.spend_cap is not None and args.spend_cap <= 0 else "",
        "--sample-runs and --sample-records must be >= 0" if min(args.sample_runs, args.sample_records) < 0 else "",
        "--metrics-port must be between 0 and 65535"
        if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535
        else "",
    ]
    tokens_in, _, tokens_out = args.call_tokens.partition("/")
    if not (tokens_in.isdigit() and tokens_out.isdigit()):
        problems.append("--call-tokens reads IN/OUT, e.g. 1500/300")
    if any(problems):
        print(f"backfill: {'; '.join(p for p in problems if p)}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    options = BackfillOptions(
        config=args.config,
        start=args.start,
        end=args.end,
        scorers=tuple(args.scorers),
        yes=args.yes,
        budget=JudgeBudget(share, args.judge_concurrency, args.spend_cap),
        sample_records=args.sample_records,
        sample_runs=args.sample_runs,
        call_tokens=(int(tokens_in), int(tokens_out)),
        metrics_port=args.metrics_port,
        progress_bar=sys.stderr.isatty() if args.progress is None else args.progress,
    )
    try:
        return asyncio.run(run_backfill(settings, options, confirm=_confirm, out=sys.stdout, err=sys.stderr))
    except KeyboardInterrupt:  # before scoring started (once it has, Ctrl-C stops it cleanly and it says so)
        print("backfill: interrupted before scoring started; nothing was committed", file=sys.stderr)
        return 1


def _confirm(prompt: str) -> bool:
    try:
        answer = input(prompt)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _demo(args: argparse.Namespace) -> int:
    """The embedded default. 0: clean stop (--duration, SIGINT, SIGTERM); 1: the service failed; 2: bad options
    or a metrics port that cannot be served."""
    import logging

    from sidecar.demo import DemoOptions, run_demo
    from sidecar.embedded.broker import BrokerStartError

    if (
        args.rate <= 0
        or args.max_records <= 0
        or args.interval <= 0
        or (args.duration is not None and args.duration <= 0)
    ):
        print("demo: --rate, --max-records, --interval and --duration must be > 0", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    if args.config_out is not None and not args.serve:
        print("demo: --config-out goes with --serve", file=sys.stderr)
        return 2
    options = DemoOptions(
        judge_model=args.judge_model,
        api_base=args.api_base,
        duration_s=args.duration,
        rate=args.rate,
        max_records=args.max_records,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        otlp_endpoint=args.otlp_endpoint,
        otlp_protocol=args.otlp_protocol,
        interval_s=args.interval,
        spend_cap_usd_per_hour=args.spend_cap,
    )
    if args.print_config:
        from sidecar.demo import serve_config_yaml

        print(serve_config_yaml(options), end="")
        return 0
    from sidecar.runtime.startup import StartupFailure

    try:
        if args.serve:
            import tempfile
            from pathlib import Path

            from sidecar.demo import run_serve

            where = Path(args.config_out or Path(tempfile.gettempdir()) / "scoring-sidecar-demo.yaml")
            return asyncio.run(run_serve(options, where))
        return asyncio.run(run_demo(options))
    except BrokerStartError as exc:
        raise StartupFailure(f"the embedded broker did not start: {exc}", 1) from exc


def _eval(args: argparse.Namespace) -> int:
    """Offline evaluation. 0: every run scored and every threshold holds; 1: a threshold breached; 2: invalid
    input; 3: runs failed (0 with --allow-failures)."""
    import logging
    from pathlib import Path

    from sidecar.eval import main as eval_main

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    return eval_main(
        Path(args.dataset),
        Path(args.config),
        output=Path(args.output) if args.output else None,
        thresholds=args.threshold,
        thresholds_file=Path(args.thresholds) if args.thresholds else None,
        concurrency=args.concurrency,
        stand_in=args.stand_in_judge,
        progress=args.progress,
        allow_failures=args.allow_failures,
    )


def _relative_times_attached(argv: Sequence[str]) -> list[str]:
    """``--from -7d`` as ``--from=-7d``: argparse takes a value starting with ``-`` for an option otherwise."""
    import re

    attached: list[str] = []
    for token in argv:
        if attached and attached[-1] in ("--from", "--to") and re.fullmatch(r"-\d+(\.\d+)?[smhdw]", token):
            attached[-1] = f"{attached[-1]}={token}"
        else:
            attached.append(token)
    return attached


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = _parser().parse_args(_relative_times_attached(sys.argv[1:] if argv is None else argv))
    if args.command == "demo":
        return _guarded("demo", lambda: _demo(args))
    if args.command == "eval":
        return _guarded("eval", lambda: _eval(args))
    if args.command == "validate":
        return _guarded("validate", lambda: _validate(args))
    if args.command == "preview":
        return _guarded("preview", lambda: _preview(args))
    if args.command == "kinds":
        from sidecar.scorers.registry import kinds_table

        print(kinds_table())
        print("\nor `python: package.module:factory` for your own (docs/scorers.md)")
        return 0
    if args.command == "run":
        return _guarded("run", lambda: _run(args))
    if args.command == "backfill":
        return _guarded("backfill", lambda: _backfill(args))
    return 2


if __name__ == "__main__":
    sys.exit(main())
