"""The configuration reference (docs/configuration.md) is what the settings models say: regenerated and compared."""

from __future__ import annotations

from pathlib import Path

from sidecar.settings import Settings
from sidecar.settings.reference import reference_markdown

ROOT = Path(__file__).resolve().parents[1]


def test_the_configuration_reference_is_the_settings_models() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == reference_markdown(), "regenerate: scoring-sidecar config-reference > docs/configuration.md"


def test_every_block_of_the_settings_has_its_section() -> None:
    page = reference_markdown()
    for name in Settings.model_fields:
        assert f"\n## `{name}`\n" in page, name
