"""``scoring-sidecar``: the command line."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from sidecar import __version__

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scoring-sidecar", description=__doc__)
    parser.add_argument("--version", action="version", version=f"scoring-sidecar {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="score example agent runs end to end with prompt alignment (no API key, no services needed)",
    )
    demo.add_argument("--judge-model", help="a litellm model id (e.g. openai/gpt-4o-mini); default: local stand-in")
    demo.add_argument("--api-base", help="the judge's API base URL (OpenAI-compatible servers)")
    run = commands.add_parser("run", help="consume traces from Kafka and score them until SIGTERM")
    run.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration file")
    validate = commands.add_parser("validate", help="check a configuration file (and build its scorers); exit 0 or 2")
    validate.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration file")
    return parser


def _validate(args: argparse.Namespace) -> int:
    """Load the settings and build every scorer; print a verdict. 0: valid, 2: invalid."""
    from pathlib import Path

    from sidecar.runtime.scorer_factory import build_scorers
    from sidecar.runtime.settings import SettingsError, load_settings

    try:
        settings = load_settings(Path(args.config))
        build_scorers(settings)
    except SettingsError as exc:
        print(f"config INVALID: {args.config}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 2
    ids = ", ".join(s.id for s in settings.scorers)
    judges = ", ".join(settings.judges) or "none"
    topics = ", ".join(settings.kafka.topics)
    counts = f"{len(settings.scorers)} scorers ({ids}), {len(settings.judges)} judges ({judges})"
    print(f"config OK: {counts}, topics ({topics})")
    return 0


def _run(args: argparse.Namespace) -> int:
    """Load the settings, then serve until SIGTERM/SIGINT. 0: clean stop, 2: invalid configuration."""
    import logging
    from pathlib import Path

    from sidecar.runtime.settings import SettingsError, load_settings

    try:
        settings = load_settings(Path(args.config))
    except SettingsError as exc:
        print(f"config INVALID: {args.config}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    from sidecar.runtime.app import serve

    return serve(settings)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from sidecar.demo import run_demo

        return asyncio.run(run_demo(judge_model=args.judge_model, api_base=args.api_base))
    if args.command == "validate":
        return _validate(args)
    if args.command == "run":
        return _run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
