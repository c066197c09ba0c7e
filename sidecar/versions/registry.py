"""The versions of one agent, in the order this process first saw them, under a bounded set of label values.

Versions come from traced attributes: a release per deploy, or an instrumentation that writes a build id or a
commit per process, would make one time series per value. So each agent keeps at most ``max_versions`` label
values, ``other`` included: the newest ``max_versions - 1`` versions (by first-seen time) keep their name, and a
version displaced by newer ones is labelled ``other`` from then on (it is remembered as displaced, up to
``DISPLACED_MEMORY`` versions per agent, so that a late run of it does not count as a new release). A pinned
reference keeps its name whatever arrives, and is never the newest: it is what the newest is compared with.

Which version is *newest* is the order of first sight in this process: after a restart during a canary, the order
is the order in which the two versions' runs arrive again; pin the reference (``versions.reference``) where that
matters (docs/versions.md).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

__all__ = ["DISPLACED_MEMORY", "OTHER", "AgentVersions", "KnownVersion", "Seen"]

OTHER: Final = "other"
DISPLACED_MEMORY: Final = 1024


@dataclass(slots=True)
class KnownVersion:
    name: str
    first_seen_ms: int
    last_seen_ms: int


@dataclass(frozen=True, slots=True)
class Seen:
    """A run's version as the metrics label it, and what its arrival changed."""

    label: str  # the version, or OTHER once displaced
    released: bool = False  # a version never seen before: the newest now, its comparison starts
    displaced: tuple[str, ...] = ()  # versions that lost their label to it


class AgentVersions:
    def __init__(self, max_versions: int, pinned: str | None = None) -> None:
        if max_versions < 3:
            raise ValueError("max_versions must be at least 3: the newest, its reference and other")
        self._named_at_most = max_versions - 1
        self.pinned = pinned
        self.named: dict[str, KnownVersion] = {}  # first-seen order
        self._displaced: OrderedDict[str, None] = OrderedDict()

    def see(self, version: str, time_ms: int) -> Seen:
        known = self.named.get(version)
        if known is not None:
            known.last_seen_ms = max(known.last_seen_ms, time_ms)
            return Seen(version)
        if version in self._displaced:
            self._displaced.move_to_end(version)
            return Seen(OTHER)
        reference = self.newest
        self.named[version] = KnownVersion(version, time_ms, time_ms)
        displaced = self._displace(keep={version, *([reference.name] if reference else [])})
        return Seen(version, released=version != self.pinned, displaced=displaced)

    def _displace(self, keep: set[str]) -> tuple[str, ...]:
        out: list[str] = []
        for name in list(self.named):
            if len(self.named) <= self._named_at_most:
                break
            if name in keep or name == self.pinned:
                continue
            del self.named[name]
            out.append(name)
            self._displaced[name] = None
            if len(self._displaced) > DISPLACED_MEMORY:
                self._displaced.popitem(last=False)
        return tuple(out)

    @property
    def newest(self) -> KnownVersion | None:
        """The version first seen last, the pinned reference aside."""
        for name in reversed(self.named):
            if name != self.pinned:
                return self.named[name]
        return None

    def reference_of(self, version: str) -> str | None:
        """What ``version`` is compared with: the pinned reference, else the version first seen just before it."""
        if self.pinned is not None:
            return self.pinned if version != self.pinned else None
        names = list(self.named)
        at = names.index(version) if version in self.named else -1
        return names[at - 1] if at > 0 else None

    def forget_idle(self, before_ms: int, keep: set[str]) -> tuple[str, ...]:
        """Forget the versions with no run since ``before_ms`` (neither ``keep`` nor the pinned one): they may come
        back as new releases, unlike displaced ones."""
        idle = tuple(
            name
            for name, known in self.named.items()
            if known.last_seen_ms < before_ms and name not in keep and name != self.pinned
        )
        for name in idle:
            del self.named[name]
        return idle
