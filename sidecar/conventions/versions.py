"""Which version of its agent a run is: read from a configured list of attributes, the first one present wins.

By default ``gen_ai.agent.version`` on the agent span (OTel GenAI), then ``service.version`` on its resource (what
every OTel SDK's ``OTEL_SERVICE_VERSION`` or a Helm chart's image tag sets). A key is written with where it is read:
``span.<key>`` (the scored span's attributes, the agent span at ``scope: trace``) or ``resource.<key>``.

A version is traced content: it is kept as text of at most ``MAX_VERSION_CHARS`` characters (longer ones are cut
there), and becomes a metrics label only under the bound of ``versions.max_versions`` (sidecar.versions.registry).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from sidecar.core import names
from sidecar.core.runs import ResourceValue

__all__ = [
    "DEFAULT_VERSIONS",
    "DEFAULT_VERSION_ATTRIBUTES",
    "MAX_VERSION_CHARS",
    "NO_VERSIONS",
    "VersionAttributes",
    "parse_version_attribute",
]

Where = Literal["span", "resource"]
DEFAULT_VERSION_ATTRIBUTES: Final = (f"span.{names.GEN_AI_AGENT_VERSION}", f"resource.{names.SERVICE_VERSION}")
MAX_VERSION_CHARS: Final = 128
_PREFIXES: Final[tuple[Where, ...]] = ("span", "resource")


def parse_version_attribute(text: str) -> tuple[Where, str]:
    """``span.gen_ai.agent.version`` → ``("span", "gen_ai.agent.version")``; ``ValueError`` naming the two forms."""
    for where in _PREFIXES:
        prefix = where + "."
        if text.startswith(prefix) and len(text) > len(prefix):
            return where, text[len(prefix) :]
    raise ValueError(f"{text!r}: write span.<attribute> or resource.<attribute> (e.g. span.gen_ai.agent.version)")


class VersionAttributes(BaseModel):
    """Where a run's version is read, in order (an empty tuple: versions are not read)."""

    model_config = ConfigDict(frozen=True)

    sources: tuple[tuple[Where, str], ...] = ()

    @classmethod
    def of(cls, texts: Iterable[str]) -> VersionAttributes:
        return cls(sources=tuple(parse_version_attribute(text) for text in texts))

    @property
    def resource_keys(self) -> frozenset[str]:
        """The resource attributes ingest must keep with each run for the version to be read from them."""
        return frozenset(key for where, key in self.sources if where == "resource")

    def version_of(
        self, span_attributes: Mapping[str, Any], resource_attributes: Iterable[tuple[str, ResourceValue]]
    ) -> str | None:
        if not self.sources:
            return None
        resource: dict[str, ResourceValue] | None = None
        for where, key in self.sources:
            if where == "span":
                value = span_attributes.get(key)
            else:
                if resource is None:
                    resource = dict(resource_attributes)
                value = resource.get(key)
            text = _text(value)
            if text:
                return text
        return None


def _text(value: Any) -> str | None:
    # bool is an int: a flag is no version.
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = str(value).strip()
    return text[:MAX_VERSION_CHARS] or None


DEFAULT_VERSIONS: Final = VersionAttributes.of(DEFAULT_VERSION_ATTRIBUTES)
NO_VERSIONS: Final = VersionAttributes()
