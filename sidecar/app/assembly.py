"""One assembly for every command: validated settings → the running parts.

``run``, ``eval`` and ``demo`` all build their judges, scorers, sinks and observers here, so they cannot
drift apart:

- **judges**: per declared judge, its ``JudgeGate`` (limits, circuit breaker, spend cap) and the one
  ``JudgeClient`` that calls it, reporting every call to the observers;
- **scorers**: built from the registry or a ``python:`` factory, checked to call only declared judges,
  and bound to those judges' clients (``Scorer.bind``): no step can reach a model around its gate;
- **sinks**: the destinations of the live service (Kafka score records, OTLP, Phoenix annotations), when
  asked for;
- **observers**: the metrics (when given) and whatever the command listens with (the demo's summary,
  ``eval``'s table), behind one fan-out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from exporters.kafka_scores import SCORE_SOURCE, KafkaScoreSink
from exporters.otlp import OtlpTraceSink
from exporters.phoenix import DROP_REASONS as PHOENIX_DROP_REASONS
from exporters.phoenix import AnnotatorKind, PhoenixAnnotationSink
from exporters.prometheus import SidecarMetrics
from sidecar.app.scorer_factory import build_scorers, facts_for, kind_for
from sidecar.core import Sink
from sidecar.core.observers import Observers, ServiceObserver
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.judge_gate import GateConfig, JudgeGate
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
        refused = [
            f"{sink.name}: {sink.problem}"
            for sink in self.sinks
            if isinstance(sink, OtlpTraceSink | PhoenixAnnotationSink) and sink.problem
        ]
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
    score_source: str = SCORE_SOURCE,
) -> Assembly:
    """Build the parts ``settings`` describes. Raises ``SettingsError`` (key and line) when a scorer cannot
    be built or calls an undeclared judge.

    ``sinks``: build the live destinations (needs ``Settings``, with Kafka). ``max_hold_s``: how long a judge
    call may wait for an unavailable judge (``None``: as long as it takes; ``eval`` bounds it). ``score_source``:
    what the score records say produced them (``backfill`` for a past window; the score ids do not change).
    """
    observer = Observers([*([metrics] if metrics is not None else []), *observers])
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
        judges[name] = AssembledJudge(name, model, gate, JudgeClient(model, gate=gate, observers=[observer]))

    built = build_scorers(settings)
    scorers = []
    for scorer_settings in settings.scorers:
        own = judges[scorer_settings.judge] if scorer_settings.judge is not None else None
        # The scorer's own judge first: two judges declared alike still each get their own gate.
        clients = [*([own.client] if own else []), *(j.client for j in judges.values() if j is not own)]
        kind = kind_for(scorer_settings)
        scorer = built[scorer_settings.id]
        scorers.append(
            ConfiguredScorer(
                scorer=scorer.bind(*clients),
                selection=scorer_settings.selection(),
                scale=scorer_settings.scale,
                judge_model=own.label if own is not None else None,
                scope=scorer_settings.targets.scope,
                facts=facts_for(scorer_settings, scorer),
                kind=kind.name if kind is not None else "python",
            )
        )
    annotator_kinds: dict[str, AnnotatorKind] = {
        configured.scorer.id: "LLM" if configured.judge_model is not None or scorer_settings.needs_judge else "CODE"
        for configured, scorer_settings in zip(scorers, settings.scorers, strict=True)
    }
    destinations = _sinks(settings, observer, annotator_kinds, score_source) if sinks else ()
    if metrics is not None:
        for judge in judges.values():
            metrics.register_judge(judge.model)
            metrics.track_judge_holds(judge.label, judge.gate.held_runs, judge.gate.oldest_hold_s)
            metrics.track_judge_pause(judge.label, _pause_reason_of(judge.gate))
        for configured in scorers:
            metrics.register_scorer(
                configured.scorer.id,
                kind=configured.kind,
                direction=configured.facts.direction,
                scale=configured.scale,
                scope=configured.scope,
            )
        for sink in destinations:
            drop_reasons: tuple[str, ...] = ()
            if isinstance(sink, PhoenixAnnotationSink):
                drop_reasons = PHOENIX_DROP_REASONS
            elif isinstance(sink, KafkaScoreSink):
                drop_reasons = ("rejected",)
            metrics.register_exporter(
                sink.name,
                lambda sink=sink: sink.outstanding,  # type: ignore[misc]
                drop_reasons=drop_reasons,
            )
            if isinstance(sink, OtlpTraceSink) and sink.evaluation_logs:
                metrics.track_exporter_signal(sink.name, "logs", functools.partial(_signal_off, sink, "logs"))
    return Assembly(judges, tuple(scorers), destinations, observer, metrics)


def _signal_off(sink: OtlpTraceSink, signal: str) -> bool:
    return signal in sink.disabled_signals


def _sinks(
    settings: EvalSettings, observer: ServiceObserver, annotator_kinds: dict[str, AnnotatorKind], score_source: str
) -> tuple[Sink, ...]:
    if not isinstance(settings, Settings):
        raise TypeError("the live sinks need the live settings (with kafka)")
    exporters = settings.exporters
    kafka = settings.kafka
    sinks: list[Sink] = []
    if exporters.kafka_scores.enabled:
        sinks.append(
            KafkaScoreSink(
                kafka.bootstrap_servers_str,
                topic=exporters.kafka_scores.topic,
                producer_options=kafka.security.client_options(),
                enable_idempotence=kafka.enable_idempotence,
                max_pending=exporters.kafka_scores.max_pending_records,
                observer=observer,
                score_source=score_source,
            )
        )
    if exporters.otlp.is_enabled and exporters.otlp.endpoint:
        sinks.append(
            OtlpTraceSink(
                exporters.otlp.endpoint,
                protocol=exporters.otlp.protocol,
                headers=exporters.otlp.header_values(),
                timeout_s=exporters.otlp.timeout_s,
                evaluation_logs=exporters.otlp.evaluation_logs,
                resource_attributes=exporters.otlp.resource_attributes,
            )
        )
    phoenix = exporters.phoenix
    if phoenix.is_enabled and phoenix.base_url:
        sinks.append(
            PhoenixAnnotationSink(
                phoenix.base_url,
                api_key=phoenix.api_key_value(),
                annotator_kinds=annotator_kinds,
                batch_size=phoenix.batch_size,
                timeout_s=phoenix.timeout_s,
                max_pending=phoenix.max_pending,
                span_wait_s=phoenix.span_wait_s,
                observer=observer,
            )
        )
    return tuple(sinks)
