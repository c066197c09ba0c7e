"""What each subcommand does with its parsed options: settings loaded, the command run, its exit status.

The commands import what they use lazily: ``--help`` and ``--version`` stay fast."""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the settings module imports pydantic and the scorer library: not for --help
    from sidecar.demo import DemoOptions
    from sidecar.scoring import Scorer
    from sidecar.settings import EvalSettings, SettingsError

__all__ = ["backfill", "compare", "demo", "eval_", "preview", "run", "validate"]


def preview(args: argparse.Namespace) -> int:
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


def corrections(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    from sidecar.corrections import CorrectionsOptions
    from sidecar.corrections import main as corrections_main

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    options = CorrectionsOptions(
        config=Path(args.config),
        scorer=args.scorer,
        start=args.start,
        end=args.end,
        output=Path(args.output) if args.output else None,
        lookback_s=args.lookback,
        every_pair=args.all,
    )
    return corrections_main(options)


def _invalid(config: str, error: SettingsError) -> int:
    """Print every problem of an invalid configuration (key, line, message); the exit status 2."""
    print(f"config INVALID: {config}", file=sys.stderr)
    for problem in error.problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def validate(args: argparse.Namespace) -> int:
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
        estimate = _cost_estimate(settings, scorers, args.traffic, args.call_tokens, args.turns_per_conversation)
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


def _cost_estimate(
    settings: EvalSettings, scorers: dict[str, Scorer], traffic: str, call_tokens: str, turns: float
) -> str | None:
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
    if not turns >= 1:
        print(f"validate: --turns-per-conversation {turns:g}: a conversation has at least one turn", file=sys.stderr)
        return None
    rows = estimate_costs(
        settings,
        scorers,
        traces_per_s=rate,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        turns_per_conversation=turns,
    )
    caps = {
        judge.to_judge_model().litellm_model: (judge.spend_cap_usd_per_hour, judge.on_spend_cap)
        for judge in settings.judges.values()
        if judge.spend_cap_usd_per_hour is not None
    }
    return render_costs(
        rows,
        traces_per_s=rate,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        caps=caps,
        turns_per_conversation=turns,
    )


def _worker_position(value: str) -> tuple[int, int]:
    index, _, count = value.partition("/")
    position = int(index), int(count)
    if not 0 <= position[0] < position[1]:
        raise ValueError(value)
    return position


def run(args: argparse.Namespace) -> int:
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


def backfill(args: argparse.Namespace) -> int:
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


def compare(args: argparse.Namespace) -> int:
    """A window of the score topic through the version comparison. 0: printed; 2: invalid options, configuration,
    scorer, topic or window; 4: the broker unreachable."""
    import logging
    from pathlib import Path

    from sidecar.compare import DEFAULT_MAX_RECORDS, CompareOptions, run_compare
    from sidecar.settings import SettingsError, load_settings

    try:
        settings = load_settings(Path(args.config))
    except SettingsError as exc:
        return _invalid(args.config, exc)
    if args.max_records is not None and args.max_records < 1:
        print("compare: --max-records must be at least 1", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    options = CompareOptions(
        agent=args.agent,
        scorer=args.scorer,
        start=args.start,
        end=args.end,
        topic=args.topic,
        max_records=DEFAULT_MAX_RECORDS if args.max_records is None else args.max_records,
        include_backfill=args.include_backfill,
        json=args.json,
    )
    return asyncio.run(run_compare(settings, options, out=sys.stdout))


def _confirm(prompt: str) -> bool:
    try:
        answer = input(prompt)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def demo(args: argparse.Namespace) -> int:
    """The embedded default. 0: clean stop (--duration, SIGINT, SIGTERM); 1: the service failed; 2: bad options
    or a metrics port that cannot be served."""
    import logging

    from sidecar.demo import DemoOptions, run_demo
    from sidecar.embedded.broker import BrokerStartError, missing_broker

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

    missing = missing_broker()
    if missing is not None:
        print(f"demo: {missing}", file=sys.stderr)
        return 2
    try:
        if args.serve:
            return _serve(options, args.config_out)
        return asyncio.run(run_demo(options))
    except BrokerStartError as exc:
        raise StartupFailure(f"the embedded broker did not start: {exc}", 1) from exc


def _serve(options: DemoOptions, config_out: str | None) -> int:
    """``demo --serve``, its configuration written to ``config_out`` or, by default, into a directory of its own
    (``mkdtemp``: private, a name nobody could plant a symlink at beforehand), removed at the stop."""
    import shutil
    import tempfile
    from pathlib import Path

    from sidecar.demo import run_serve

    directory: Path | None = None
    if config_out is not None:
        where = Path(config_out)
    else:
        directory = Path(tempfile.mkdtemp(prefix="scoring-sidecar-demo-"))
        where = directory / "sidecar.yaml"
    try:
        return asyncio.run(run_serve(options, where))
    except OSError as exc:
        if exc.filename is None or Path(exc.filename) != where:
            raise
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        print(f"demo: cannot write the configuration to {where}: {reason}", file=sys.stderr)
        return 2
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def eval_(args: argparse.Namespace) -> int:
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
        records=args.records,
        min_agreement=args.min_agreement,
        agree_within=args.agree_within,
    )
