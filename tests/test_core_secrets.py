"""One way to read an exporter's key: the setting first, else its environment variable, without the line break a
key mounted from a file ends with (sidecar.core.config.secret_value, used by the Phoenix, Langfuse and Datadog
blocks)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from exporters.datadog import DatadogExporterSettings
from exporters.langfuse import LangfuseExporterSettings
from exporters.phoenix import PhoenixExporterSettings
from sidecar.core.config import secret_value


def test_the_setting_wins_over_the_environment() -> None:
    assert secret_value(SecretStr("set"), "KEY", {"KEY": "env"}) == "set"


def test_the_environment_when_the_setting_is_unset() -> None:
    assert secret_value(None, "KEY", {"KEY": "env"}) == "env"
    assert secret_value(None, "KEY", {"OTHER": "env"}) == ""


def test_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIDECAR_TEST_SECRET", "from-process\n")
    assert secret_value(None, "SIDECAR_TEST_SECRET") == "from-process"


@given(key=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1).map(str.strip).filter(bool))
def test_a_line_break_or_spaces_around_a_key_are_dropped(key: str) -> None:
    for mounted in (key + "\n", key + "\r\n", " " + key + " \n"):
        assert secret_value(None, "KEY", {"KEY": mounted}) == key
        assert secret_value(SecretStr(mounted), "KEY", {}) == key


def test_the_three_blocks_read_their_keys_the_same_way() -> None:
    environ = {"PHOENIX_API_KEY": "px\n", "DD_API_KEY": "dd\n", "LANGFUSE_PUBLIC_KEY": "pk\n"}
    environ["LANGFUSE_SECRET_KEY"] = "sk\n"
    assert PhoenixExporterSettings(base_url="http://p:6006").api_key_value(environ) == "px"
    assert DatadogExporterSettings(enabled=True).api_key_value(environ) == "dd"
    assert LangfuseExporterSettings(base_url="http://l:3000").keys(environ) == ("pk", "sk")
    # Phoenix alone runs without a key (a local Phoenix asks for none): no key is None there, "" elsewhere
    assert PhoenixExporterSettings(base_url="http://p:6006").api_key_value({}) is None
    assert DatadogExporterSettings(enabled=True).api_key_value({}) == ""
    assert LangfuseExporterSettings(base_url="http://l:3000").keys({}) == ("", "")
    set_keys = LangfuseExporterSettings(base_url="http://l:3000", public_key="own-pk", secret_key="own-sk")
    assert set_keys.keys(environ) == ("own-pk", "own-sk")
