"""``scoring-sidecar compare``: one agent's versions compared on one scorer over a window of the score topic, with
the live service's own comparison (docs/versions.md)."""

from sidecar.compare.command import DEFAULT_MAX_RECORDS, CompareOptions, run_compare

__all__ = ["DEFAULT_MAX_RECORDS", "CompareOptions", "run_compare"]
