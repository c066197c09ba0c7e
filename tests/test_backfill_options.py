"""What a backfill is asked for, before it touches a broker: its window's times, its consumer group's name, its
judges' budget and its scorers, and its metrics' mode label."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.prometheus import SidecarMetrics
from sidecar.backfill.budget import JudgeBudget, backfill_settings
from sidecar.backfill.metrics import mode_labelled
from sidecar.backfill.window import Window, WindowError, backfill_group_id, parse_time, utc_text
from sidecar.runtime.startup import StartupFailure
from sidecar.settings import load_settings

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def test_times_with_a_zone_relative_or_now() -> None:
    assert parse_time("2026-11-24T00:00:00Z", now=NOW, option="--from").unix_ms == ms(
        datetime(2026, 11, 24, tzinfo=UTC)
    )
    assert parse_time("2026-11-24T01:00:00+01:00", now=NOW, option="--from").unix_ms == ms(
        datetime(2026, 11, 24, tzinfo=UTC)
    )
    assert parse_time("-7d", now=NOW, option="--from").unix_ms == ms(NOW - timedelta(days=7))
    assert parse_time("-36h", now=NOW, option="--from").unix_ms == ms(NOW - timedelta(hours=36))
    assert parse_time("-90m", now=NOW, option="--from").unix_ms == ms(NOW - timedelta(minutes=90))
    assert parse_time("-2w", now=NOW, option="--from").unix_ms == ms(NOW - timedelta(weeks=2))
    now = parse_time("now", now=NOW, option="--to")
    assert now.unix_ms == ms(NOW) and now.relative
    assert utc_text(ms(datetime(2026, 11, 24, 3, 4, 5, 600_000, tzinfo=UTC))) == "2026-11-24T03:04:05.600Z"


@pytest.mark.parametrize(
    ("start", "end", "says"),
    [
        ("2026-11-24T00:00:00", None, "has no zone: add one (Z for UTC, or +01:00)"),
        ("yesterday", None, "write an ISO 8601 time with its zone"),
        ("-1d", "-2d", "is not before --to -2d"),
        ("2026-11-26T00:00:00Z", None, "is not before --to now"),
        ("2026-11-26T00:00:00Z", "2026-11-27T00:00:00Z", "is in the future"),
    ],
)
def test_a_window_that_cannot_be_used_says_why_in_one_line(start: str, end: str | None, says: str) -> None:
    with pytest.raises(WindowError) as raised:
        Window.parse(start, end, now=NOW)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_the_group_is_named_after_the_window_as_written_and_the_scorers_fingerprints() -> None:
    scorers = [("alignment", "fp1"), ("similarity", "fp2")]
    relative = backfill_group_id("sidecar", ["spans"], Window.parse("-7d", None, now=NOW), scorers)
    # The same command an hour later: its window moved with the clock, its group is the same (it resumes).
    later = Window.parse("-7d", None, now=NOW + timedelta(hours=1))
    assert backfill_group_id("sidecar", ["spans"], later, scorers) == relative
    assert relative.startswith("sidecar.backfill.-7d.now.")
    # Two spellings of one instant are one window; another instant, scorer or fingerprint is another group.
    utc = Window.parse("2026-11-24T00:00:00Z", "2026-11-25T00:00:00Z", now=NOW)
    paris = Window.parse("2026-11-24T01:00:00+01:00", "2026-11-25T01:00:00+01:00", now=NOW)
    assert backfill_group_id("sidecar", ["spans"], utc, scorers) == backfill_group_id(
        "sidecar", ["spans"], paris, scorers
    )
    assert backfill_group_id("sidecar", ["spans"], utc, scorers).startswith(
        "sidecar.backfill.2026-11-24T000000Z.2026-11-25T000000Z."
    )
    others = {
        backfill_group_id(
            "sidecar", ["spans"], Window.parse("2026-11-24T00:00:01Z", "2026-11-25T00:00:00Z", now=NOW), scorers
        ),
        backfill_group_id("sidecar", ["spans"], utc, [("alignment", "fp1")]),
        backfill_group_id("sidecar", ["spans"], utc, [("alignment", "fp9"), ("similarity", "fp2")]),
        backfill_group_id("sidecar", ["other"], utc, scorers),
    }
    assert len(others) == 4 and backfill_group_id("sidecar", ["spans"], utc, scorers) not in others


def write_config(tmp_path: Path, judge: dict[str, object]) -> Path:
    path = tmp_path / "sidecar.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["spans"]},
                "judges": {"default": {"model": "openai/gpt-4o-mini", "api_key": "k", **judge}},
                "scorers": [
                    {"id": "alignment", "kind": "prompt-alignment", "judge": "default"},
                    {"id": "similarity", "kind": "content-similarity"},
                ],
            }
        )
    )
    return path


def test_the_judges_get_a_share_of_their_limits_and_wait_at_the_spend_cap(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        {"max_concurrency": 16, "rpm": 600, "tpm": 90_000, "spend_cap_usd_per_hour": 4.0, "on_spend_cap": "shed"},
    )
    settings = load_settings(path)
    judge = backfill_settings(settings, [], JudgeBudget(), config=str(path)).judges["default"]
    assert (judge.max_concurrency, judge.rpm, judge.tpm, judge.spend_cap_usd_per_hour) == (4, 150, 22_500, 1.0)
    assert judge.on_spend_cap == "hold"  # shedding would commit past traces the backfill never scored
    tiny = backfill_settings(settings, [], JudgeBudget(share=0.01), config=str(path)).judges["default"]
    assert (tiny.max_concurrency, tiny.rpm) == (1, 6)
    chosen = backfill_settings(
        settings, ["alignment"], JudgeBudget(concurrency=7, spend_cap_usd_per_hour=0.5), config=str(path)
    )
    assert [s.id for s in chosen.scorers] == ["alignment"]
    assert (chosen.judges["default"].max_concurrency, chosen.judges["default"].spend_cap_usd_per_hour) == (7, 0.5)
    uncapped = load_settings(write_config(tmp_path, {}))
    assert backfill_settings(uncapped, [], JudgeBudget(), config="f").judges["default"].spend_cap_usd_per_hour is None


def test_a_scorer_the_configuration_does_not_hold_is_refused_with_its_ids(tmp_path: Path) -> None:
    path = write_config(tmp_path, {})
    with pytest.raises(StartupFailure) as raised:
        backfill_settings(load_settings(path), ["alignmnt"], JudgeBudget(), config=str(path))
    assert raised.value.exit_code == 2
    assert str(raised.value) == (
        f"--scorer alignmnt: no scorer has that id in {path}; did you mean alignment? "
        "its scorers: alignment, similarity"
    )


def test_every_served_series_of_a_backfill_carries_its_mode() -> None:
    metrics = SidecarMetrics()
    metrics.register_scorer("alignment", kind="prompt-alignment", direction="higher")
    served = generate_latest(mode_labelled(metrics.registry)).decode()
    samples = [s for family in text_string_to_metric_families(served) for s in family.samples]
    assert samples and all(s.labels.get("mode") == "backfill" for s in samples)
    assert any(s.name == "scoring_sidecar_scorer_info" and s.labels["scorer"] == "alignment" for s in samples)


def test_a_backfill_runs_no_feedback_join_nor_canary(tmp_path: Path) -> None:
    """The live service's feedback stage joins the backfilled scores (it reads them from the score topic); a backfill
    joins no group of its own for feedback, and runs no canary (``run`` starts it)."""
    path = write_config(tmp_path, {})
    config = yaml.safe_load(path.read_text())
    config["feedback"] = {"topic": "agent_feedback"}
    path.write_text(yaml.safe_dump(config))
    settings = load_settings(path)
    assert settings.feedback is not None
    assert backfill_settings(settings, [], JudgeBudget(), config=str(path)).feedback is None
