"""``scoring-sidecar eval DATASET --config FILE``: the offline twin of live scoring (Mastra's ``runEvals``).

Every dataset item is scored by every configured scorer, with the service's judges, judge gates
(concurrency, RPM/TPM, spend cap, circuit breaker) and transport retries. Then a summary table, and a
non-zero exit when a scorer's average falls outside its threshold.

Dataset: JSONL (one object per line) or CSV (a header row), with ``input`` and ``output`` (required),
``ground_truth``, ``request_context`` (an object; in CSV a JSON string), ``context`` (the retrieved documents
the RAG scorers judge against: a list of strings; in CSV a JSON string of one), and optionally ``id`` and
``system`` (system instructions). A string ``input`` becomes one user message (plus ``system`` as a system
message), a string ``output`` one assistant message: the agent run shape live scoring gives scorers. Other
JSON values (Mastra's agent shape, message lists) are passed to the scorers as they are. ``context`` reaches
the scorers as ``request_context["context"]``, merged into the item's own ``request_context`` (which then may
not have a ``context`` key too); ``ground_truth`` is the run's ground truth (``ctx.run.ground_truth``), what
the eval-only kinds compare with. The whole file is checked before anything is scored: every bad line (JSONL line,
CSV row; a CSV header once) is reported together, unknown fields with the field they most likely meant.

Configuration: the same YAML as ``scoring-sidecar run``: ``judges`` and ``scorers`` are used; ``kafka`` may be
left out; ``targets`` and ``sampling`` do not apply (every item is scored by every scorer); ``runtime.
run_timeout_s`` bounds each run.

Thresholds (``--threshold ID=MIN`` or ``ID=MIN:MAX``, or ``--thresholds FILE`` mapping an id to ``MIN`` or
``{min, max}``): bounds in [0, 1] on the scorer's average score divided by its ``scale``. Exit codes: 0 every
run scored (or not scorable) and every average within its threshold; 1 a threshold breached (a scorer with a
threshold and no score at all breaches it); 2 invalid configuration, dataset or thresholds; 3 runs failed (and
no threshold breached): the averages leave those items out, so the run proves less than it seems;
``--allow-failures`` makes that 0. Failed items never abort the run.
Before anything is scored, a judge that a scorer uses with no ``api_key``, no ``api_base`` and its provider's
key variable unset (litellm's ``*_API_KEY`` names) is named and the exit code is 2. After the run, the table
says in words why runs failed, per judge (``sidecar.app.judge_health``).

``--output FILE.jsonl``: one line per (item, scorer), in dataset order: the Kafka score record
(``exporters.kafka_scores.score_record_json``) with ``scoreSource: "eval"``; runs without a score carry the
same identifying fields with ``score: null`` and ``error`` (``ScorerRunError.to_dict()``) or ``notScorable``,
plus the judge record of what completed. Offline items have no trace: ``traceId``/``spanId`` are derived from
sha256(item index, item JSON), so the same dataset gives the same ``scoreId``s run after run.
"""

from sidecar.eval.command import evaluate, main, run_eval, stand_in_settings
from sidecar.eval.dataset import DatasetError, EvalError, EvalItem, load_dataset
from sidecar.eval.report import EvalReport, EvalTally, ItemResult, Progress, ScorerTally, render_report, write_results
from sidecar.eval.thresholds import Threshold, load_thresholds, parse_threshold

__all__ = [
    "DatasetError",
    "EvalError",
    "EvalItem",
    "EvalReport",
    "EvalTally",
    "ItemResult",
    "Progress",
    "ScorerTally",
    "Threshold",
    "evaluate",
    "load_dataset",
    "load_thresholds",
    "main",
    "parse_threshold",
    "render_report",
    "run_eval",
    "stand_in_settings",
    "write_results",
]
