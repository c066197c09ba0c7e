"""Scores as Langfuse scores (docs/langfuse.md).

- ``mapping``: a scored run → ``CreateScoreRequest`` (ids, value and data type, environment);
- ``sink``: :class:`LangfuseScoreSink`, ``POST /api/public/scores`` in batches, one per request on a server
  without batch scores;
- ``declaration``: the ``exporters.langfuse`` block and the exporter's declaration.
"""

from exporters.langfuse.declaration import LangfuseExporterSettings, build_langfuse_sink
from exporters.langfuse.mapping import ENVIRONMENT_ATTRIBUTES, LangfuseScore, langfuse_score, span_environment
from exporters.langfuse.sink import (
    LANGFUSE_PUBLIC_KEY_ENV,
    LANGFUSE_SECRET_KEY_ENV,
    SCORES_PATH,
    LangfuseScoreSink,
)

__all__ = [
    "ENVIRONMENT_ATTRIBUTES",
    "LANGFUSE_PUBLIC_KEY_ENV",
    "LANGFUSE_SECRET_KEY_ENV",
    "SCORES_PATH",
    "LangfuseExporterSettings",
    "LangfuseScore",
    "LangfuseScoreSink",
    "build_langfuse_sink",
    "langfuse_score",
    "span_environment",
]
