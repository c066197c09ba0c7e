"""``scoring-sidecar``: the command line (options in ``parser``, what each command does in ``commands``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from sidecar import __version__
from sidecar.cli import commands
from sidecar.cli.parser import build_parser

__all__ = ["main"]


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
    args = build_parser().parse_args(_relative_times_attached(sys.argv[1:] if argv is None else argv))
    if args.command == "demo":
        return _guarded("demo", lambda: commands.demo(args))
    if args.command == "eval":
        return _guarded("eval", lambda: commands.eval_(args))
    if args.command == "validate":
        return _guarded("validate", lambda: commands.validate(args))
    if args.command == "preview":
        return _guarded("preview", lambda: commands.preview(args))
    if args.command == "config-reference":
        from sidecar.settings.reference import reference_markdown

        print(reference_markdown(), end="")
        return 0
    if args.command == "kinds":
        from sidecar.scorers.catalog import kinds_table

        print(kinds_table())
        print("\nor `python: package.module:factory` for your own (docs/scorers.md)")
        return 0
    if args.command == "run":
        return _guarded("run", lambda: commands.run(args))
    if args.command == "backfill":
        return _guarded("backfill", lambda: commands.backfill(args))
    if args.command == "compare":
        return _guarded("compare", lambda: commands.compare(args))
    if args.command == "corrections":
        return _guarded("corrections", lambda: commands.corrections(args))
    return 2
