"""``scoring-sidecar preview``: one scorer tried on recent runs, nothing exported, nothing committed."""

from sidecar.preview.command import PreviewOptions, main, parse_source, preview

__all__ = ["PreviewOptions", "main", "parse_source", "preview"]
