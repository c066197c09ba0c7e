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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from sidecar.demo import run_demo

        return asyncio.run(run_demo(judge_model=args.judge_model, api_base=args.api_base))
    return 2


if __name__ == "__main__":
    sys.exit(main())
