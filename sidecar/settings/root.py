"""The whole file: ``EvalSettings`` (what ``eval`` needs) and ``Settings`` (``run``: Kafka required), their
cross-block rules (with those each exporter declares), and where each key was written."""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from exporters.registry import SettingsView
from sidecar.redaction.engine import missing_packages
from sidecar.scoring.judge.model import JudgeModel
from sidecar.settings.base import _Frozen, _non_empty, redact
from sidecar.settings.errors import _problem
from sidecar.settings.exporters import ExportersSettings
from sidecar.settings.feedback import FeedbackSettings
from sidecar.settings.judges import JudgeSettings
from sidecar.settings.kafka import KafkaSettings
from sidecar.settings.redaction import RedactSettings, effective_redaction, switched
from sidecar.settings.runtime import RuntimeSettings
from sidecar.settings.scorers import ScorerSettings
from sidecar.settings.sessions import SessionsSettings
from sidecar.settings.versions import VersionsSettings

__all__ = ["EvalSettings", "Settings"]


class _Provenance:
    """Where each key was written (dotted path -> line), for error messages after validation. Two settings
    with equal values are equal wherever they were written, so it never takes part in equality."""

    __slots__ = ("lines",)

    def __init__(self) -> None:
        self.lines: dict[str, int] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Provenance)

    def __hash__(self) -> int:
        return 0


class EvalSettings(_Frozen):
    """A configuration ``eval`` can use: judges and scorers (``kafka`` may be left out; ``targets``,
    ``sampling`` and the exporters do not apply offline)."""

    kafka: KafkaSettings | None = None
    judges: dict[str, JudgeSettings] = Field(default_factory=dict)
    scorers: tuple[ScorerSettings, ...]
    runtime: RuntimeSettings = RuntimeSettings()
    exporters: ExportersSettings = ExportersSettings()
    # Conversations (scope: session); required by a live service with a session scorer.
    sessions: SessionsSettings | None = None
    # Every judge's redaction unless its own block says otherwise (docs/redaction.md); unset: none.
    redact: RedactSettings | None = None
    # Agent versions: where they are read, and the comparison of each agent's newest one (docs/versions.md).
    versions: VersionsSettings = VersionsSettings()
    # Human feedback joined to the scores (docs/feedback.md); read by a live service only.
    feedback: FeedbackSettings | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"  # the service's log level, any case
    _source: _Provenance = PrivateAttr(default_factory=lambda: _Provenance())

    _not_empty = field_validator("scorers")(_non_empty)
    _redact_switch = field_validator("redact", mode="before")(switched)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _references(self) -> EvalSettings:
        problems: list[InitErrorDetails] = []
        seen: dict[str, int] = {}
        judges = ", ".join(sorted(self.judges)) or "none defined"
        for i, scorer in enumerate(self.scorers):
            if scorer.id in seen:
                problems.append(
                    _problem(("scorers", i, "id"), f"duplicate scorer id (also scorers[{seen[scorer.id]}])")
                )
            else:
                seen[scorer.id] = i
            if scorer.judge is not None and scorer.judge not in self.judges:
                problems.append(
                    _problem(("scorers", i, "judge"), f"no judge named {scorer.judge!r} (judges: {judges})")
                )
            elif scorer.judge is None and scorer.needs_judge:
                problems.append(
                    _problem(("scorers", i, "judge"), f"kind {scorer.kind!r} needs a judge (judges: {judges})")
                )
        problems.extend(self._redaction_problems())
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def _redaction_problems(self) -> list[InitErrorDetails]:
        """Each redact block as the judges will run it; the packages once, at the first block."""
        blocks: list[tuple[tuple[str | int, ...], RedactSettings]] = []
        if self.redact is not None and self.redact.enabled:
            blocks.append((("redact",), self.redact))
        for name, judge in self.judges.items():
            effective = effective_redaction(judge.redact, self.redact)
            if judge.redact is not None and effective is not None:
                blocks.append((("judges", name, "redact"), effective))
        if not blocks:
            return []
        missing = missing_packages()
        if missing is not None:
            return [_problem(blocks[0][0], missing)]
        return [_problem(path, problem) for path, block in blocks for problem in block.problems()]

    def redaction_of(self, judge: str) -> RedactSettings | None:
        """The redaction the judge named ``judge`` runs with (``None``: none)."""
        return effective_redaction(self.judges[judge].redact, self.redact)

    def judge_models(self) -> dict[str, JudgeModel]:
        return {name: judge.to_judge_model() for name, judge in self.judges.items()}

    def line_of(self, path: str) -> int | None:
        """The YAML line of a dotted path (``scorers[1].kind``), or of its nearest parent that has one."""
        while path:
            line = self._source.lines.get(path)
            if line is not None:
                return line
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return None

    def redacted_dict(self) -> dict[str, Any]:
        """A JSON-able dump safe to log: every secret replaced by ``**********``."""
        return typing.cast(dict[str, Any], redact(self.model_dump(mode="python")))


class Settings(EvalSettings):
    """The configuration of the live service (``run``): Kafka is required."""

    kafka: KafkaSettings

    # The live rules, one validator per set of blocks they read: ``validate`` runs each on the blocks that are valid
    # on their own, so a rule reading only the scorers reports even while the kafka block has problems of its own.
    @model_validator(mode="after")
    def _live_scorers(self) -> Settings:
        problems = [
            problem for i, scorer in enumerate(self.scorers) for problem in scorer.live_problems(("scorers", i))
        ]
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    @model_validator(mode="after")
    def _live_sessions(self) -> Settings:
        problems = self._session_problems()
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    @model_validator(mode="after")
    def _live_feedback(self) -> Settings:
        problems = self._feedback_problems()
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    @model_validator(mode="after")
    def _live_exporters(self) -> Settings:
        view = SettingsView(
            scorer_ids=tuple(scorer.id for scorer in self.scorers),
            input_topics=tuple(self.kafka.topics),
            dead_letter_topic=self.kafka.dead_letter_topic,
        )
        problems = [
            problem
            for exporter, block in self.exporters.declared()  # each exporter's own rules across blocks
            for problem in exporter.problems(block, view)
        ]
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def _session_problems(self) -> list[InitErrorDetails]:
        sessions = self.sessions
        if sessions is None:
            return [
                _problem(
                    ("scorers", i, "targets", "scope"),
                    "scope: session needs the sessions block (its internal topic, idle_s and bounds; docs/sessions.md)",
                )
                for i, scorer in enumerate(self.scorers)
                if scorer.targets.scope == "session"
            ]
        taken = {*self.kafka.topics, self.kafka.dead_letter_topic}
        scores = self.exporters.kafka_scores
        if scores.enabled:
            taken.add(scores.topic)
        if sessions.topic in taken:
            return [_problem(("sessions", "topic"), "must differ from the input, dead-letter and score topics")]
        return []

    def _feedback_problems(self) -> list[InitErrorDetails]:
        feedback = self.feedback
        if feedback is None:
            return []
        problems: list[InitErrorDetails] = []
        scores = self.exporters.kafka_scores
        if not scores.enabled:
            problems.append(
                _problem(("feedback",), "feedback joins the score records: exporters.kafka_scores must be enabled")
            )
        ids = {scorer.id for scorer in self.scorers}
        known = ", ".join(sorted(ids))
        for name, scorer_id in feedback.names.items():
            if scorer_id not in ids:
                problems.append(_problem(("feedback", "names", name), f"no scorer {scorer_id!r} (scorers: {known})"))
        for scorer_id, floor in feedback.min_agreement_by_scorer.items():
            if scorer_id not in ids:
                problems.append(
                    _problem(("feedback", "min_agreement_by_scorer", scorer_id), f"no such scorer (scorers: {known})")
                )
            elif not 0.0 <= floor <= 1.0:
                problems.append(_problem(("feedback", "min_agreement_by_scorer", scorer_id), "a share from 0 to 1"))
        limits = feedback.limits(scores.topic)
        taken = {*self.kafka.topics, self.kafka.dead_letter_topic, scores.topic}
        if self.sessions is not None:
            taken.add(self.sessions.topic)
        for key, topic in (("topic", limits.topic), ("state_topic", limits.state), ("pairs_topic", limits.pairs)):
            if topic in taken:
                problems.append(
                    _problem(
                        ("feedback", key),
                        f"{topic!r} must differ from the input, dead-letter, score and conversation topics and from "
                        "the feedback block's other topics",
                    )
                )
            taken.add(topic)
        return problems
