"""The redact blocks as an operator meets them: ``validate`` names what is wrong with its line (unknown entities, a
hash without its key, names without their model, judges of one scorer that redact differently, the packages not
installed: one line, at validate and at start-up); ``preview`` shows the redacted prompt; ``eval`` applies the same
rules; names and places with a spaCy pipeline installed as a folder; Presidio never reaches for the network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main as cli
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.eval.command import main as eval_main
from sidecar.preview.command import PreviewOptions
from sidecar.preview.command import main as preview_main
from sidecar.redaction.entities import DEFAULT_ENTITIES, ENTITIES, unknown_entity_problem
from sidecar.redaction.redactor import PresidioRedactor, RedactionPolicy
from sidecar.scoring import AgentRunInput
from sidecar.scoring.agent import assistant_message, user_message
from sidecar.scoring.steps import ScorerRun
from tests.support.personal_data import ALLOWED, pii_trace
from tests.support.threaded_judge import ThreadedJudgeServer

ROOT = Path(__file__).resolve().parents[1]
EMAIL, CARD = "maria.lopez@example.com", "4111 1111 1111 1111"


def write(tmp_path: Path, text: str, name: str = "sidecar.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def eval_config(url: str, redact: str = "redact: {allow: [" + ALLOWED + "]}") -> str:
    return f"""\
judges:
  default: {{model: openai/gpt-4o-mini, api_base: "{url}", api_key: sk-test, transport: http}}
{redact}
scorers:
  - id: helpful
    kind: llm-judge
    judge: default
    options:
      instructions: Decide whether the answer helps.
      prompt: "System: {{{{ system }}}}\\nRequest: {{{{ input }}}}\\nAnswer: {{{{ output }}}}"
      output: {{type: boolean}}
"""


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli(["validate", "--config", str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# -- validate ----------------------------------------------------------------------------------------------------


def test_validate_names_unknown_entities_with_their_line_and_the_closest_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = eval_config("http://127.0.0.1:9/v1", "redact:\n  entities: [EMAIL_ADRESS, CREDIT_CARD, PERSON]")
    code, printed = validate(write(tmp_path, config), capsys)
    assert code == 2
    assert "redact.entities (line 4): unknown entity 'EMAIL_ADRESS' (did you mean EMAIL_ADDRESS?)" in printed
    assert "PERSON is found by a language model: set names: true instead of listing it" in printed


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ("redact: {operator: hash}", "redact (line 3): operator hash needs hash_key, at least 16 bytes"),
        ("redact: {operator: hash, hash_key: short}", "operator hash needs hash_key, at least 16 bytes"),
        ("redact: {entities: []}", "redact (line 3): redacts nothing: list entities, or set names: true"),
        (
            "redact: {names: true, names_model: en_no_such_model}",
            "redact (line 3): names: true needs the spaCy model 'en_no_such_model' installed as a package",
        ),
        ("redact: {operatr: mask}", "redact.operatr (line 3): unknown key (did you mean 'operator'?"),
    ],
)
def test_validate_refuses_a_block_that_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], block: str, problem: str
) -> None:
    code, printed = validate(write(tmp_path, eval_config("http://127.0.0.1:9/v1", block)), capsys)
    assert code == 2 and problem in printed, printed


def test_a_judges_own_block_is_checked_as_it_will_run_over_the_top_level_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "redact: {operator: hash, hash_key: 0123456789abcdef-deployment}"
    config = eval_config("http://127.0.0.1:9/v1", key).replace(
        "transport: http}", "transport: http, redact: {entities: [CREDIT_CARD]}}"
    )
    code, printed = validate(write(tmp_path, config), capsys)
    assert code == 0, printed  # the judge's block takes the top-level operator and its key
    config = eval_config("http://127.0.0.1:9/v1", "").replace(
        "transport: http}", "transport: http, redact: {operator: hash}}"
    )
    code, printed = validate(write(tmp_path, config), capsys)
    assert code == 2 and "judges.default.redact (line 2): operator hash needs hash_key" in printed


def test_a_judges_own_block_turns_redaction_on_where_the_top_level_block_is_off(tmp_path: Path) -> None:
    from sidecar.settings import load_eval_settings

    config = eval_config("http://127.0.0.1:9/v1", "redact: {enabled: false, allow: [" + ALLOWED + "]}")
    settings = load_eval_settings(config)
    assert settings.redaction_of("default") is None
    own = config.replace("transport: http}", "transport: http, redact: {entities: [CREDIT_CARD]}}")
    block = load_eval_settings(own).redaction_of("default")
    assert block is not None and block.entities == ("CREDIT_CARD",) and block.allow == (ALLOWED,)
    off = config.replace("redact: {enabled: false", "redact: {enabled: true").replace(
        "transport: http}", "transport: http, redact: false}"
    )
    assert load_eval_settings(off).redaction_of("default") is None


def test_judges_of_one_scorer_must_redact_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = """\
judges:
  first: {model: openai/gpt-4o-mini, redact: {entities: [EMAIL_ADDRESS]}}
  second: {model: openai/gpt-4o, redact: false}
  third: {model: openai/gpt-4.1-mini, redact: {entities: [CREDIT_CARD]}}
scorers:
  - id: two-judges
    kind: "python: tests.support.two_judges:create_two_judge_scorer"
    judge: first
    options: {second: openai/gpt-4o}
  - id: differ
    kind: "python: tests.support.two_judges:create_two_judge_scorer"
    judge: first
    options: {second: openai/gpt-4.1-mini}
"""
    code, printed = validate(write(tmp_path, config), capsys)
    assert code == 2
    assert "scorers[0]" not in printed  # a judge that redacts nothing beside one that does: the run is redacted
    assert (
        "scorers[1].kind (line 11): calls judges first and third, which redact differently: a run is redacted once "
        "for all of a scorer's judges, so give them the same redact block"
    ) in printed


HIDE_PRESIDIO = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("presidio_analyzer", "presidio_anonymizer"):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Hide())
from sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["validate", "run"])
def test_without_the_packages_validate_and_run_refuse_in_one_line(tmp_path: Path, command: str) -> None:
    config = eval_config("http://127.0.0.1:9/v1") + "kafka: {bootstrap_servers: 127.0.0.1:9}\n"
    done = subprocess.run(
        [sys.executable, "-c", HIDE_PRESIDIO, command, "--config", str(write(tmp_path, config))],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    problems = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("  - ")]
    assert problems == [
        "  - redact (line 3): redaction needs presidio-analyzer and presidio-anonymizer, which are not installed: "
        "pip install 'scoring-sidecar[redact]'"
    ], done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_every_listed_entity_has_its_recognizer_in_presidio() -> None:
    from presidio_analyzer import predefined_recognizers

    for entity in ENTITIES.values():
        recognizer = getattr(predefined_recognizers, entity.recognizer)
        assert entity.name in recognizer(supported_language="en").supported_entities, entity
    assert unknown_entity_problem(DEFAULT_ENTITIES) is None


# -- preview and eval --------------------------------------------------------------------------------------------


def test_preview_shows_the_prompt_the_judge_would_read_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "trace.otlp"
    record.write_bytes(pii_trace().record)
    config = write(tmp_path, eval_config("http://127.0.0.1:9/v1"))
    options = PreviewOptions(
        config=config, scorer="helpful", source="file", path=record, show_prompt_only=True, max_chars=100_000
    )
    assert preview_main(options) == 0
    printed = capsys.readouterr().out
    assert "Request 1: <EMAIL_ADDRESS_1>." in printed and "<CREDIT_CARD_1>" in printed
    assert EMAIL not in printed and CARD not in printed
    assert f"Escalate to {ALLOWED}." in printed
    assert (
        "personal data redacted before the judge reads it (judges.default.redact, placeholder): CREDIT_CARD, "
        "EMAIL_ADDRESS, IBAN_CODE, IP_ADDRESS, US_SSN"
    ) in printed


def test_eval_applies_the_same_rules_and_writes_the_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "dataset.jsonl"
    item = {
        "id": "refund",
        "system": f"Escalate to {ALLOWED}.",
        "input": f"I am {EMAIL}, refund my card {CARD}",
        "output": f"Done, {EMAIL}: the card {CARD} is refunded.",
    }
    dataset.write_text(json.dumps(item) + "\n")
    out = tmp_path / "scores.jsonl"
    with ThreadedJudgeServer(heuristic_reply) as server:
        config = write(tmp_path, eval_config(server.url))
        code = eval_main(
            dataset,
            config,
            output=out,
            thresholds=(),
            thresholds_file=None,
            concurrency=1,
            stand_in=False,
            progress=False,
        )
        requests = [json.dumps(r.body, ensure_ascii=False) for r in server.requests]
    assert code == 0, capsys.readouterr()
    assert requests and all(EMAIL not in r and CARD not in r for r in requests)
    assert "I am <EMAIL_ADDRESS_1>, refund my card <CREDIT_CARD_1>" in requests[0]
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["redactions"] == {"EMAIL_ADDRESS": 2, "CREDIT_CARD": 2}
    assert EMAIL not in out.read_text() and CARD not in out.read_text()


# -- operators -------------------------------------------------------------------------------------------------


def run_of(request: str, answer: str) -> ScorerRun:
    return ScorerRun(
        input=AgentRunInput(input_messages=(user_message(request),)), output=(assistant_message(answer),), run_id="r"
    )


def texts(run: ScorerRun) -> tuple[str, str]:
    assert isinstance(run.input, AgentRunInput)
    return run.input.input_messages[0].text, run.output[0].text


def test_mask_keeps_the_last_four_characters_of_long_values() -> None:
    redactor = PresidioRedactor(RedactionPolicy.of(DEFAULT_ENTITIES, operator="mask"))
    request, _ = texts(redactor.redact(run_of(f"card {CARD}, mail {EMAIL}, ip 203.0.113.42", "ok")).run)
    assert request == "card ***************1111, mail *******************.com, ip ********3.42"


def test_hash_is_the_same_for_a_value_in_every_run_and_differs_by_key() -> None:
    def hashed(key: bytes, text: str) -> str:
        redactor = PresidioRedactor(RedactionPolicy.of(DEFAULT_ENTITIES, operator="hash", hash_key=key))
        return texts(redactor.redact(run_of(text, "ok")).run)[0]

    key = b"0123456789abcdef-deployment"
    first, second = hashed(key, f"mail {EMAIL}"), hashed(key, f"again {EMAIL.upper()}")
    token = first.removeprefix("mail ")
    assert token.startswith("<EMAIL_ADDRESS_") and len(token) == len("<EMAIL_ADDRESS_>") + 10
    assert second == f"again {token}"  # one address, whatever its case: one token across runs
    assert hashed(b"another-deployment-key", f"mail {EMAIL}") != first


def test_numbers_passed_as_json_numbers_are_redacted_too() -> None:
    from sidecar.scoring.agent import ToolInvocation

    call = ToolInvocation(tool_call_id="c", tool_name="charge", args={"card": 4111111111111111, "amount": 120})
    run = ScorerRun(input="refund", output=(assistant_message("ok", tool_invocations=(call,)),), run_id="r")
    redacted = PresidioRedactor(RedactionPolicy.of(DEFAULT_ENTITIES)).redact(run)
    args: Any = redacted.run.output[0].tool_invocations[0].args
    assert args == {"card": "<CREDIT_CARD_1>", "amount": 120} and redacted.counts == {"CREDIT_CARD": 1}


# -- names and places ----------------------------------------------------------------------------------------------


def test_names_and_places_with_a_spacy_pipeline_installed_as_a_folder(tmp_path: Path) -> None:
    """The real loading path with a pipeline the test makes (no model is downloaded here): an entity ruler that
    knows one name and one city stands in for a trained model's recognizer."""
    import spacy

    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(  # type: ignore[attr-defined]
        [{"label": "PERSON", "pattern": "Maria Lopez"}, {"label": "GPE", "pattern": "Lyon"}]
    )
    nlp.to_disk(tmp_path / "pipeline")
    policy = RedactionPolicy.of(DEFAULT_ENTITIES, names_model=str(tmp_path / "pipeline"))
    redactor = PresidioRedactor(policy)
    redacted = redactor.redact(run_of(f"Maria Lopez ({EMAIL}) moved to Lyon.", "Welcome to Lyon, Maria Lopez."))
    assert texts(redacted.run) == (
        "<PERSON_1> (<EMAIL_ADDRESS_1>) moved to <LOCATION_1>.",
        "Welcome to <LOCATION_1>, <PERSON_1>.",
    )
    assert redacted.counts == {"PERSON": 2, "LOCATION": 2, "EMAIL_ADDRESS": 1}
    assert redactor.entities[-2:] == ("PERSON", "LOCATION")


# -- no network ----------------------------------------------------------------------------------------------------

NO_NETWORK = """
import sys, time
# What reaching for another host takes (a local socket bound by an import's IPv6 probe is not among them).
NETWORK = {"socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto", "urllib.Request",
           "http.client.connect"}
attempts = []
def audit(event, args):
    if event in NETWORK:
        attempts.append(event)
sys.addaudithook(audit)
started = time.monotonic()
from sidecar.redaction.entities import ENTITIES
from sidecar.redaction.redactor import PresidioRedactor, RedactionPolicy
from sidecar.scoring.steps import ScorerRun
redactor = PresidioRedactor(RedactionPolicy.of(ENTITIES))
text = "write to maria.lopez@example.co.uk or bob@shop.example.de"
done = redactor.redact(ScorerRun(input=text, output="ok", run_id="r"))
print(done.run.input, sorted(set(attempts)), round(time.monotonic() - started, 1))
"""


def test_presidio_is_set_up_and_runs_without_reaching_for_the_network(tmp_path: Path) -> None:
    """A fresh process with an empty home (no public suffix list cached): the e-mail recognizer's domain check reads
    the snapshot tldextract ships; no socket is opened, no URL requested, nothing waits on a timeout."""
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    text, attempts, seconds = done.stdout.rsplit(" ", 2)[0], done.stdout.split("[", 1)[1].split("]")[0], done.stdout
    assert text.startswith("write to <EMAIL_ADDRESS_1> or <EMAIL_ADDRESS_2>"), done.stdout
    assert attempts == "", done.stdout
    assert float(seconds.split()[-1]) < 30, done.stdout
    assert not (tmp_path / "cache").exists()  # nothing cached either: there was nothing fetched
