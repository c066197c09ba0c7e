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


def test_every_key_says_what_it_does() -> None:
    rows = [line for line in reference_markdown().splitlines() if line.startswith("| `")]
    assert len(rows) > 150
    silent = [row.split("|")[1].strip() for row in rows if row.rstrip().endswith("|  |")]  # an empty last cell
    assert silent == [], "comment these fields in their settings model (or give them a description)"
