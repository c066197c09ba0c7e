"""Configurations from anyone who can open a pull request: every command reads them within a bound of time and
memory, and a file it cannot take ends in one line and exit 2, never a traceback (docs/limits.md)."""

from __future__ import annotations

import contextlib
import io
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.cli import main

HEAD = (
    "judges:\n  default: {model: openai/gpt-4o-mini, api_key: sk-x}\n"
    "scorers:\n  - {id: sim, kind: content-similarity}\n"
)
LIVE_HEAD = "kafka: {bootstrap_servers: 127.0.0.1:1}\n" + HEAD


def validate(text: str | bytes, tmp: Path, *, command: tuple[str, ...] = ("validate",)) -> tuple[int, str, float, int]:
    """``scoring-sidecar <command> --config`` on ``text``: exit status, stderr, seconds, peak traced bytes."""
    path = tmp / "config.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", errors="surrogatepass"))
    err, out = io.StringIO(), io.StringIO()
    tracemalloc.start()
    started = time.monotonic()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            status = main([*command, "--config", str(path)])
        return status, err.getvalue(), time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def billion_laughs(levels: int, width: int = 9) -> str:
    laughs = ", ".join(['"lol"'] * width)
    lines = [f"l0: &l0 [{laughs}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_kilobyte_alias_bomb_is_refused_at_once_with_one_line(tmp_path: Path) -> None:
    bomb = (
        LIVE_HEAD
        + "runtime:\n  trace_buffer: {idle_s: 1}\nx-anchors:\n"
        + "".join(f"  {line}\n" for line in billion_laughs(9).splitlines())
    )
    assert len(bomb) < 1200
    status, err, seconds, peak = validate(bomb, tmp_path)
    assert status == 2 and "Traceback" not in err
    assert "expands to more than 100000 values: YAML aliases" in err
    assert seconds < 10 and peak < 100 * 2**20, (seconds, peak)  # it took 13 s and 1.3 GB


def test_merge_keys_of_merge_keys_end_quickly(tmp_path: Path) -> None:
    """Merges of merges are counted before they are copied in (a PyYAML that copies every merged pair
    again would multiply them); this one only repeats keys, and ends as an unknown key."""
    lines = ["x-merges:", "  m0: &m0 {" + ", ".join(f"k{i}: {i}" for i in range(9)) + "}"]
    lines += [f"  m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}]}}" for i in range(1, 9)]
    status, err, seconds, _ = validate(LIVE_HEAD + "\n".join(lines) + "\n", tmp_path)
    assert status == 2 and "Traceback" not in err and "x-merges (line 6): unknown key" in err
    assert seconds < 10


def test_an_alias_inside_its_own_anchor_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    status, err, _, _ = validate(LIVE_HEAD + "x-loop: &loop [1, *loop]\n", tmp_path)
    assert status == 2 and "Traceback" not in err and "RecursionError" not in err
    assert "nests more than 64 levels deep" in err
    status, err, _, _ = validate(LIVE_HEAD + "x-merge-loop: &m {a: 1, <<: *m}\n", tmp_path)
    assert status == 2 and "Traceback" not in err and "nests more than 64 levels deep" in err


def test_a_mapping_key_that_is_not_a_scalar_is_a_problem_not_built(tmp_path: Path) -> None:
    status, err, _, _ = validate(LIVE_HEAD + "? &k [1, *k]\n: value\n", tmp_path)
    assert status == 2 and "Traceback" not in err and "keys must be plain scalars" in err


@pytest.mark.parametrize(
    "command",
    [
        ("validate",),
        ("run",),
        ("eval", "DATASET"),
        ("preview", "--scorer", "sim", "--dataset", "DATASET"),
        ("backfill", "--from", "-1h"),
    ],
)
def test_a_configuration_that_is_not_utf8_is_one_line_naming_the_file_and_byte_offset_in_every_command(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    dataset = tmp_path / "items.jsonl"
    dataset.write_text('{"input": "a", "output": "b"}\n')
    text = LIVE_HEAD.encode() + b"# r\xe9sum\xe9 of the setup, saved as Latin-1\n"
    status, err, _, _ = validate(text, tmp_path, command=tuple(str(dataset) if c == "DATASET" else c for c in command))
    assert status == 2 and "Traceback" not in err and "UnicodeDecodeError" not in err, err
    offset = len(LIVE_HEAD.encode()) + 3
    assert f"config.yaml is not UTF-8 text: byte 0xe9 at byte offset {offset}" in err, err
    assert "(line 6, invalid continuation byte)" in err


def test_a_character_yaml_refuses_is_one_line(tmp_path: Path) -> None:
    status, err, _, _ = validate(LIVE_HEAD + "x-bell: \x07\n", tmp_path)
    assert status == 2 and "Traceback" not in err and "YAML cannot hold character #x0007" in err


# -- property: any YAML built from anchors, aliases and merges ------------------------------------------------------


@st.composite
def anchored_documents(draw: Callable[..., object]) -> str:
    """A block of anchored values, each a list or a mapping of scalars, of aliases to earlier anchors (or to itself)
    and of merge keys, under a key validate does not know (it is read, expanded and refused), or as a scorer's
    options (read and validated)."""
    count = draw(st.integers(min_value=1, max_value=12))
    lines = []
    for i in range(count):
        width = draw(st.integers(min_value=0, max_value=12))
        refs = [f"*a{draw(st.integers(min_value=0, max_value=i))}" for _ in range(width)]
        scalars = draw(st.lists(st.sampled_from(["1", "x", "true", "null", "'q'", "[]", "{}"]), max_size=3))
        form = draw(st.sampled_from(["list", "map", "merge"]))
        if form == "list":
            body = "[" + ", ".join(refs + scalars) + "]"
        elif form == "map":
            body = "{" + ", ".join(f"k{j}: {v}" for j, v in enumerate(refs + scalars)) + "}"
        else:
            merged = [r for r in refs if r != f"*a{i}"]
            body = "{" + ", ".join([*([f"<<: [{', '.join(merged)}]"] if merged else []), "z: 1"]) + "}"
        lines.append(f"  a{i}: &a{i} {body}")
    block = "x-anchors:\n" + "\n".join(lines) + "\n"
    if draw(st.booleans()):  # the last anchor as a scorer's options: read, then validated
        return block + LIVE_HEAD + f"  - {{id: sim2, kind: content-similarity, options: *a{count - 1}}}\n"
    return LIVE_HEAD + block


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=anchored_documents())
def test_validate_ends_in_bounded_time_and_memory_on_any_anchored_yaml(tmp_path: Path, document: str) -> None:
    status, err, seconds, peak = validate(document, tmp_path)
    assert status in (0, 2), err
    assert "Traceback" not in err, err
    assert seconds < 10, seconds
    assert peak < 300 * 2**20, peak


def test_a_thresholds_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    dataset = tmp_path / "items.jsonl"
    dataset.write_text('{"input": "a", "output": "b"}\n')
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_bytes(b"sim: 0.5 # \xe9\n")
    status, err, _, _ = validate(HEAD, tmp_path, command=("eval", str(dataset), "--thresholds", str(thresholds)))
    assert status == 2 and "Traceback" not in err
    assert "thresholds.yaml is not UTF-8 text: byte 0xe9 at byte offset 11 (line 1" in err


def test_a_configuration_over_a_megabyte_is_refused_before_it_is_read(tmp_path: Path) -> None:
    status, err, seconds, _ = validate(LIVE_HEAD + "# " + "x" * (1024 * 1024) + "\n", tmp_path)
    assert status == 2 and "Traceback" not in err and "over 1048576: is it the right file?" in err
    assert seconds < 5
