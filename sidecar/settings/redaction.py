"""``redact``: personal data taken out of every run before a judge reads it (docs/redaction.md).

The top-level ``redact`` block is every judge's default; ``judges.<name>.redact`` sets that judge's own (the keys
it sets win, the others come from the top-level block), and ``redact: false`` (``enabled: false``) on a judge turns
it off there (a judge the organisation hosts itself). With neither, nothing is redacted: a configuration written
before this block behaves as it did.

The rules that read more than one key (a hash needs its key, names need their model, both need the packages)
are checked on each judge's effective block, by the root settings (``RedactSettings.problems``; the packages once
for the file).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_core import PydanticCustomError

from sidecar.redaction.engine import missing_packages, model_problem
from sidecar.redaction.entities import DEFAULT_ENTITIES, unknown_entity_problem
from sidecar.redaction.redactor import RedactionPolicy
from sidecar.settings.base import _Frozen

__all__ = ["HASH_KEY_MIN_BYTES", "RedactSettings", "effective_redaction", "switched"]

# A shorter key could be found by trying keys against a known value's placeholder.
HASH_KEY_MIN_BYTES = 16


class RedactSettings(_Frozen):
    """Which entities are replaced, by what, and which values pass."""

    enabled: bool = True  # `redact: false` is short for `redact: {enabled: false}`
    # Presidio's entity names (docs/redaction.md lists them with what each costs); the default finds values by
    # their checksum or an unambiguous shape and costs < 2 ms per judged run.
    entities: tuple[str, ...] = DEFAULT_ENTITIES
    # placeholder: <EMAIL_ADDRESS_1>, one number per value within a run; mask: ****1111; hash: <EMAIL_ADDRESS_
    # 3f9a…>, a keyed hash, the same value the same in every run of the deployment.
    operator: Literal["placeholder", "mask", "hash"] = "placeholder"
    hash_key: SecretStr | None = None  # operator hash: at least 16 bytes, from ${ENV}
    allow: tuple[str, ...] = ()  # values that pass (the company's own support address), whole, any case
    names: bool = False  # names and places too: needs a spaCy model installed as a package
    names_model: str = Field(default="en_core_web_sm", min_length=1)  # its package name (or a pipeline's folder)

    @field_validator("entities")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        problem = unknown_entity_problem(value)
        if problem is not None:
            raise PydanticCustomError("settings", "{detail}", {"detail": problem})
        return value

    def over(self, default: RedactSettings | None) -> RedactSettings:
        """This block as a judge's own: the keys it sets, the others from the top-level ``default``."""
        if default is None:
            return self
        # A block of its own is on unless it says otherwise, whatever the top-level block's `enabled`.
        keys = self.model_fields_set | {"enabled"}
        return default.model_copy(update={name: getattr(self, name) for name in keys})

    def problems(self) -> list[str]:
        """What keeps this block, as one judge's effective redaction, from running here (one line each; the
        packages are checked once for the whole file: ``missing_packages``)."""
        problems = []
        if not self.entities and not self.names:
            problems.append("redacts nothing: list entities, or set names: true")
        if self.operator == "hash":
            key = self.hash_key.get_secret_value() if self.hash_key is not None else ""
            if len(key.encode()) < HASH_KEY_MIN_BYTES:
                problems.append(f"operator hash needs hash_key, at least {HASH_KEY_MIN_BYTES} bytes (use ${{ENV}})")
        if self.names and missing_packages() is None:
            problem = model_problem(self.names_model)
            if problem is not None:
                problems.append(problem)
        return problems

    def policy(self) -> RedactionPolicy:
        return RedactionPolicy.of(
            self.entities,
            operator=self.operator,
            allow=self.allow,
            names_model=self.names_model if self.names else None,
            hash_key=self.hash_key.get_secret_value().encode() if self.hash_key is not None else None,
        )


def switched(value: Any) -> Any:
    """``redact: false`` / ``true``: the block off, or on as the defaults (and the top-level block) say."""
    if isinstance(value, bool):
        return {"enabled": value}
    return value


def effective_redaction(own: RedactSettings | None, default: RedactSettings | None) -> RedactSettings | None:
    """A judge's redaction (``None``: none): a block of its own laid over the default, else the default."""
    effective = own.over(default) if own is not None else default
    return effective if effective is not None and effective.enabled else None
