"""The score contract: what every destination consumes and every command builds on.

- ``runs``: the run to score (``SpanTarget``, ``ScorerRunRequest``), as conventions map it from a span;
- ``scored``: the finished run (``ScoredRun``) and its deterministic ``score_id_for``;
- ``sinks``: the ``Sink`` protocol destinations implement, and ``Flushable``, what the checkpoint flushes;
- ``observers``: what the service reports as it works (``ServiceObserver``): metrics, the demo's summary
  and ``eval``'s table listen;
- ``names``: every attribute, event and header name read or written; ``timestamps``: record timestamps.

Destinations (``exporters``) import this package and ``sidecar.scoring``, never ingest, runtime or the CLI.
"""

from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.core.scored import SCORE_ID_NAMESPACE, RunOutcome, ScoredRun, score_id_for, score_id_of
from sidecar.core.sinks import Flushable, Sink, problem_of

__all__ = [
    "SCORE_ID_NAMESPACE",
    "Flushable",
    "RunOutcome",
    "ScoredRun",
    "ScorerRunRequest",
    "Sink",
    "SpanTarget",
    "problem_of",
    "score_id_for",
    "score_id_of",
]
