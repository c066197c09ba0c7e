"""Exporter kinds, declared once: what a block under ``exporters:`` builds.

Each exporter module declares itself with ``@exporter_kind(...)`` on its ``build(block, context)``: the
block's key (also the sink's ``name`` and its metrics label), its settings model (a
``sidecar.core.config.FrozenConfig``, validated with key and line like any other block), the reasons it
may drop items for (its metric series start at 0), and an optional rule across blocks (``check``, given a
small view of the rest of the settings), and the scored span's resource attributes it reads
(``resource_attributes``: ingest keeps them for every run, whichever exporters are on). ``build`` returns the
sink, or ``None`` when the block leaves the exporter off. Its readiness problem comes from the sink itself
(``sidecar.core.problem_of``); what it drops for good it hands to ``ExporterContext.set_aside`` (the score
dead letters).

``sidecar.settings.ExportersSettings`` holds one typed field per exporter (importing the module registers
it); the assembly builds, registers the metrics of and reads the readiness of every declared exporter
without naming any. Adding an exporter: its module and one settings field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from pydantic_core import InitErrorDetails

from exporters.delivery.letters import SetAsideLetter, no_dead_letters
from sidecar.core import Sink
from sidecar.core.config import FrozenConfig
from sidecar.core.observers import ServiceObserver

__all__ = [
    "ExporterContext",
    "ExporterKind",
    "KafkaConnection",
    "SettingsView",
    "exporter_kind",
    "exporter_kinds",
]

BlockT = TypeVar("BlockT", bound=FrozenConfig)


@dataclass(frozen=True, slots=True)
class KafkaConnection:
    """The cluster the service reads from, for an exporter that produces to it."""

    bootstrap_servers: str
    producer_options: Mapping[str, Any]  # security: protocol, SASL, TLS
    enable_idempotence: bool = False


def _no_signal_watch(signal: str, is_off: Callable[[], bool]) -> None:
    pass


@dataclass(frozen=True)
class ExporterContext:
    """What an exporter needs from outside its own block."""

    observer: ServiceObserver = field(default_factory=ServiceObserver)
    kafka: KafkaConnection | None = None
    # Per scorer id: whether it is judged (an LLM judge) or code, for destinations that say which.
    judged: Mapping[str, bool] = field(default_factory=dict)
    # An optional signal the exporter may turn off by itself (OTLP logs): ``is_off`` is read at scrape time.
    watch_signal: Callable[[str, Callable[[], bool]], None] = _no_signal_watch
    # Where the sink hands what it drops for good (the score dead-letter topic in the service).
    set_aside: SetAsideLetter = no_dead_letters
    # What produced the scores: the live service, or a backfill of a past window (records say so).
    score_source: str = "live"


@dataclass(frozen=True, slots=True)
class SettingsView:
    """What a rule across blocks may read of the rest of the settings (locations are from the file's root)."""

    scorer_ids: tuple[str, ...]  # scorers[i].id
    input_topics: tuple[str, ...]  # kafka.topics
    dead_letter_topic: str | None  # kafka.dead_letter_topic


Build = Callable[[BlockT, ExporterContext], Sink | None]
Check = Callable[[BlockT, SettingsView], Iterable[InitErrorDetails]]
# The scored span's resource attributes an exporter reads (OTLP: what it copies; Langfuse: the environment),
# given its block: none while the block leaves it off.
ResourceAttributes = Callable[[BlockT], Iterable[str]]


@dataclass(frozen=True)
class ExporterKind(Generic[BlockT]):
    name: str  # the key under `exporters:`, the sink's name, the metrics' `exporter` label
    settings: type[BlockT]
    build_sink: Build[BlockT]
    drop_reasons: tuple[str, ...]
    check: Check[BlockT] | None
    description: str
    resource_attributes: ResourceAttributes[BlockT] | None = None

    def build(self, block: FrozenConfig, context: ExporterContext) -> Sink | None:
        """The sink ``block`` describes (``None``: off). ``block`` must be of this kind's settings model."""
        if not isinstance(block, self.settings):
            raise TypeError(f"exporter {self.name!r} takes {self.settings.__name__}, not {type(block).__name__}")
        sink = self.build_sink(block, context)
        if sink is not None and sink.name != self.name:
            raise ValueError(f"exporter {self.name!r} built a sink named {sink.name!r}")
        return sink

    def kept_resource_attributes(self, block: FrozenConfig) -> tuple[str, ...]:
        """The scored span's resource attributes this exporter reads with ``block`` (none without a rule)."""
        if self.resource_attributes is None or not isinstance(block, self.settings):
            return ()
        return tuple(self.resource_attributes(block))

    def problems(self, block: FrozenConfig, view: SettingsView) -> list[InitErrorDetails]:
        """What ``check`` finds across blocks (none without one)."""
        if self.check is None or not isinstance(block, self.settings):
            return []
        return list(self.check(block, view))


_KINDS: dict[str, ExporterKind[Any]] = {}


def exporter_kind(
    *,
    name: str,
    settings: type[BlockT],
    description: str,
    drop_reasons: Iterable[str] = (),
    check: Check[BlockT] | None = None,
    resource_attributes: ResourceAttributes[BlockT] | None = None,
) -> Callable[[Build[BlockT]], Build[BlockT]]:
    """Register ``build(block, context) -> Sink | None`` as the exporter under ``exporters.<name>``."""

    def register(build: Build[BlockT]) -> Build[BlockT]:
        if name in _KINDS:
            raise ValueError(f"exporter {name!r} is registered twice")
        _KINDS[name] = ExporterKind(name, settings, build, tuple(drop_reasons), check, description, resource_attributes)
        return build

    return register


def exporter_kinds() -> Mapping[str, ExporterKind[Any]]:
    """Every declared exporter by name (``sidecar.settings`` imports them all, and orders them)."""
    return MappingProxyType(_KINDS)
