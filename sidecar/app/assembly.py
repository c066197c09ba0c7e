"""One assembly for every command: validated settings → the running parts.

``run``, ``eval`` and ``demo`` all build their judges, scorers, sinks and observers here, so they cannot
drift apart:

- **judges**: per declared judge, its ``JudgeGate`` (limits, circuit breaker, spend cap) and the one
  ``JudgeClient`` that calls it, reporting every call to the observers;
- **scorers**: built from the registry or a ``python:`` factory, checked to call only declared judges,
  and bound to those judges' clients (``Scorer.bind``): no step can reach a model around its gate;
- **sinks**: the destinations of the live service, when asked for: every exporter declared in
  ``exporters.registry`` builds its sink from its own block (the assembly names none of them), and its
  metrics series, drop reasons and readiness come from that declaration and the sink; what a sink drops for
  good goes to the score dead letters (``exporters.dead_letters``), a checkpointed publisher of its own;
- **observers**: the metrics (when given), the agent versions' comparisons beside them (``versions.compare``), and
  whatever the command listens with (the demo's summary,
  ``eval``'s table), behind one fan-out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporters.dead_letters import ScoreDeadLetters
from exporters.prometheus import SidecarMetrics
from exporters.prometheus.versions import VersionMetrics
from exporters.registry import ExporterContext, ExporterKind, KafkaConnection
from sidecar.app.redactors import build_redactors, scorer_redaction
from sidecar.app.scorer_factory import build_scorers, facts_for, kind_for
from sidecar.core import Flushable, Sink, problem_of
from sidecar.core.observers import Observers, ServiceObserver
from sidecar.redaction.redactor import PresidioRedactor
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.judge_gate import GateConfig, JudgeGate
from sidecar.runtime.stages import facts_of
from sidecar.scoring import JudgeModel
from sidecar.scoring.judge.client import JudgeClient
from sidecar.settings import EvalSettings, JudgeSettings, Settings

__all__ = ["AssembledJudge", "Assembly", "assemble", "gate_config"]


@dataclass(frozen=True)
class AssembledJudge:
    name: str  # the key under `judges`
    model: JudgeModel
    gate: JudgeGate
    client: JudgeClient
    redactor: PresidioRedactor | None = None  # what every run goes through before this judge reads it

    @property
    def label(self) -> str:
        """The ``judge_model`` label of its metrics (provider/model)."""
        return self.model.litellm_model


@dataclass(frozen=True)
class Assembly:
    judges: dict[str, AssembledJudge]
    scorers: tuple[ConfiguredScorer, ...]
    sinks: tuple[Sink, ...]
    observer: Observers
    metrics: SidecarMetrics | None
    # Checkpointed like the sinks, after them, but fed by them rather than by runs (the score dead letters).
    publishers: tuple[Flushable, ...] = ()

    def judges_holding(self) -> str | None:
        """A readiness problem while a judge holds runs: the records after them cannot be committed."""
        holding = [
            f"judge {j.label} {j.gate.state.replace('_', '-')}, {j.gate.held} runs held"
            for j in self.judges.values()
            if j.gate.held
        ]
        return "; ".join(holding) or None

    def exporters_refused(self) -> str | None:
        """A readiness problem while a destination refuses the scores for good (credentials, a wrong URL):
        nothing is committed past them until it takes them."""
        refused = [f"{sink.name}: {problem}" for sink in self.sinks if (problem := problem_of(sink)) is not None]
        return "; ".join(refused) or None

    def resume_judges(self) -> None:
        """Close every circuit and lift every pause (an operator fixed the key, the quota or the model)."""
        for judge in self.judges.values():
            judge.gate.resume()

    async def aclose(self) -> None:
        """Close the judges' connections (the service closes the sinks it started)."""
        for judge in self.judges.values():
            await judge.client.aclose()


def _pause_reason_of(gate: JudgeGate) -> Callable[[], str | None]:
    return lambda: gate.pause_reason


def gate_config(judge: JudgeSettings, *, max_hold_s: float | None = None) -> GateConfig:
    return GateConfig(
        max_concurrency=judge.max_concurrency,
        rpm=judge.rpm,
        tpm=judge.tpm,
        spend_cap_usd=judge.spend_cap_usd_per_hour,
        spend_window_s=3600.0,
        on_spend_cap=judge.on_spend_cap,
        failure_threshold=judge.circuit_breaker.failure_threshold,
        reset_after_s=judge.circuit_breaker.reset_after_s,
        max_hold_s=max_hold_s,
    )


def assemble(
    settings: EvalSettings,
    *,
    metrics: SidecarMetrics | None = None,
    observers: Sequence[ServiceObserver] = (),
    sinks: bool = False,
    max_hold_s: float | None = None,
    score_source: str = "live",
) -> Assembly:
    """Build the parts ``settings`` describes. Raises ``SettingsError`` (key and line) when a scorer cannot
    be built or calls an undeclared judge.

    ``sinks``: build the live destinations (needs ``Settings``, with Kafka). ``max_hold_s``: how long a judge
    call may wait for an unavailable judge (``None``: as long as it takes; ``eval`` bounds it). ``score_source``:
    what the score records say produced them (``backfill`` for a past window; the score ids do not change).
    """
    # The agent versions' comparisons (docs/versions.md): gauges beside the metrics, fed by the same runs.
    versions = (
        VersionMetrics(settings.versions.comparison(workers=settings.runtime.workers), registry=metrics.registry)
        if metrics is not None and settings.versions.compare
        else None
    )
    observer = Observers([*([metrics] if metrics is not None else []), *([versions] if versions else []), *observers])
    judges: dict[str, AssembledJudge] = {}
    for name, judge_settings in settings.judges.items():
        model = judge_settings.to_judge_model()
        gate = JudgeGate(
            model,
            gate_config(judge_settings, max_hold_s=max_hold_s),
            on_state_change=observer.judge_state_changed,
            on_spend=observer.judge_spend,
            on_hold=observer.judge_hold_ended,
            on_shed=observer.judge_refused,
        )
        client = JudgeClient(
            model, gate=gate, observers=[observer], on_structured_output=observer.judge_structured_output
        )
        judges[name] = AssembledJudge(name, model, gate, client)
    for name, judge_redactor in build_redactors(settings, observer.redacted).items():
        judges[name] = dataclasses.replace(judges[name], redactor=judge_redactor)

    built = build_scorers(settings)
    scorers = []
    for scorer_settings in settings.scorers:
        own = judges[scorer_settings.judge] if scorer_settings.judge is not None else None
        # The scorer's own judge first: two judges declared alike still each get their own gate.
        clients = [*([own.client] if own else []), *(j.client for j in judges.values() if j is not own)]
        kind = kind_for(scorer_settings)
        scorer = built[scorer_settings.id]
        redaction = scorer_redaction(scorer, settings, scorer_settings.judge)  # build_scorers refused conflicts
        redactor = judges[redaction.judge].redactor if redaction is not None else None
        scorers.append(
            ConfiguredScorer(
                scorer=scorer.bind(*clients, redactor=redactor),
                selection=scorer_settings.selection(),
                scale=scorer_settings.scale,
                judge_model=own.label if own is not None else None,
                scope=scorer_settings.targets.scope,
                facts=facts_for(scorer_settings, scorer),
                kind=kind.name if kind is not None else "python",
            )
        )
    judged = {
        configured.scorer.id: configured.judge_model is not None or scorer_settings.needs_judge
        for configured, scorer_settings in zip(scorers, settings.scorers, strict=True)
    }
    signals: list[tuple[str, str, Callable[[], bool]]] = []  # exporter, optional signal, is it off
    letters = _dead_letters(settings, observer) if sinks else None
    exported = _sinks(settings, observer, judged, signals, letters, score_source) if sinks else ()
    destinations = tuple(sink for _, sink in exported)
    if not exported:  # no exporter, nothing to set aside (and no producer to start for it)
        letters = None
    publishers: tuple[Flushable, ...] = (letters,) if letters is not None else ()
    if metrics is not None:
        for judge in judges.values():
            metrics.register_judge(judge.model)
            metrics.track_judge_holds(judge.label, judge.gate.held_runs, judge.gate.oldest_hold_s)
            metrics.track_judge_pause(judge.label, _pause_reason_of(judge.gate))
            if judge.redactor is not None:
                metrics.register_redactions(judge.name, judge.redactor.entities)
        for configured in scorers:
            metrics.register_scorer(
                configured.scorer.id,
                kind=configured.kind,
                direction=configured.facts.direction,
                scale=configured.scale,
                scope=configured.scope,
                late_spans=facts_of(configured).late_spans,
                judge_model=configured.judge_model,
            )
            if versions is not None:
                versions.register_scorer(
                    configured.scorer.id, direction=configured.facts.direction, scale=configured.scale
                )
        for exporter, sink in exported:
            metrics.register_exporter(
                sink.name,
                lambda sink=sink: sink.outstanding,  # type: ignore[misc]
                drop_reasons=exporter.drop_reasons,
            )
        for name, signal, is_off in signals:
            metrics.track_exporter_signal(name, signal, is_off)
        if letters is not None:
            metrics.register_exporter(letters.name, lambda: letters.outstanding, drop_reasons=("rejected",))
    return Assembly(judges, tuple(scorers), destinations, observer, metrics, publishers)


def _kafka_connection(settings: Settings) -> KafkaConnection:
    return KafkaConnection(
        settings.kafka.bootstrap_servers_str,
        settings.kafka.security.client_options(),
        enable_idempotence=settings.kafka.enable_idempotence,
    )


def _dead_letters(settings: EvalSettings, observer: ServiceObserver) -> ScoreDeadLetters:
    """The score topic's dead-letter publisher: where every sink sets aside what it drops for good."""
    if not isinstance(settings, Settings):
        raise TypeError("the live sinks need the live settings (with kafka)")
    topic = settings.exporters.kafka_scores.score_dead_letter_topic
    return ScoreDeadLetters(_kafka_connection(settings), topic, observer=observer)


def _sinks(
    settings: EvalSettings,
    observer: ServiceObserver,
    judged: Mapping[str, bool],
    signals: list[tuple[str, str, Callable[[], bool]]],
    letters: ScoreDeadLetters | None,
    score_source: str = "live",
) -> tuple[tuple[ExporterKind[Any], Sink], ...]:
    """Every declared exporter's sink, from its own block (in the settings' order; an exporter left off
    builds none)."""
    if not isinstance(settings, Settings):
        raise TypeError("the live sinks need the live settings (with kafka)")
    kafka = _kafka_connection(settings)
    built: list[tuple[ExporterKind[Any], Sink]] = []
    for kind, block in settings.exporters.declared():

        def watch_signal(signal: str, is_off: Callable[[], bool], exporter: str = kind.name) -> None:
            signals.append((exporter, signal, is_off))

        context = ExporterContext(
            observer=observer, kafka=kafka, judged=judged, watch_signal=watch_signal, score_source=score_source
        )
        if letters is not None:
            context = dataclasses.replace(context, set_aside=letters.set_aside)
        sink = kind.build(block, context)
        if sink is not None:
            built.append((kind, sink))
    return tuple(built)
