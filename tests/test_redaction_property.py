"""Property: whatever text surrounds them, planted e-mail addresses, card numbers (Luhn-valid) and IBANs (checksum-
valid) never reach the judge's request with the default redaction on (the scripted judge server's request log)."""

from __future__ import annotations

import json
import string
from typing import Any

import tldextract
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from sidecar.redaction.entities import DEFAULT_ENTITIES
from sidecar.redaction.redactor import PresidioRedactor, RedactionPolicy
from sidecar.scorers import create_llm_judge_scorer
from sidecar.scoring import Scorer
from sidecar.scoring.judge.model import JudgeModel
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.agent_runs import agent_run
from tests.support.judge import judge_client

REDACTOR = PresidioRedactor(RedactionPolicy.of(DEFAULT_ENTITIES))
JUDGE = {
    "instructions": "Decide whether the answer helps.",
    "prompt": "Request: {{ input }}\nAnswer: {{ output }}",
    "output": {"type": "boolean"},
}


def luhn_digit(digits: str) -> str:
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d) * (2 if i % 2 == 0 else 1)
        total += n - 9 if n > 9 else n
    return str((10 - total % 10) % 10)


@st.composite
def cards(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(["4", "51", "52", "53", "54", "55"]))
    body = prefix + "".join(
        draw(st.lists(st.sampled_from(string.digits), min_size=15 - len(prefix), max_size=15 - len(prefix)))
    )
    number = body + luhn_digit(body)
    separator = draw(st.sampled_from(["", " ", "-"]))
    return separator.join(number[i : i + 4] for i in range(0, 16, 4))


def iban_check(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    numeric = "".join(str(int(c, 36)) for c in rearranged)
    return f"{98 - int(numeric) % 97:02d}"


_BBAN = {  # country: (letters, digits) of its basic bank account number, in that order
    "DE": (0, 18),
    "NL": (4, 10),
    "GB": (4, 14),
}


@st.composite
def ibans(draw: st.DrawFn) -> str:
    country = draw(st.sampled_from(sorted(_BBAN)))
    letters, digits = _BBAN[country]
    bban = "".join(draw(st.lists(st.sampled_from(string.ascii_uppercase), min_size=letters, max_size=letters)))
    bban += "".join(draw(st.lists(st.sampled_from(string.digits), min_size=digits, max_size=digits)))
    iban = country + iban_check(country, bban) + bban
    if draw(st.booleans()):
        iban = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    return iban


_LOCAL = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=10)


_SUFFIXES = tldextract.TLDExtract(cache_dir=None, suffix_list_urls=())  # the snapshot the package ships


@st.composite
def emails(draw: st.DrawFn) -> str:
    local = draw(_LOCAL)
    if draw(st.booleans()):
        local += draw(st.sampled_from([".", "_", "+", "-"])) + draw(_LOCAL)
    domain = draw(st.text(string.ascii_lowercase, min_size=2, max_size=10))
    tld = draw(st.sampled_from(["com", "org", "net", "de", "co.uk", "io", "fr"]))
    # An address can only be at a registrable domain: "mil.io" or "gov.uk" are suffixes, where no one has mail.
    assume(_SUFFIXES(f"{domain}.{tld}").domain)
    return f"{local}@{domain}.{tld}"


# Text around the values: words, punctuation, line breaks, quote tags and template syntax, never digits or an @
# touching a value (pieces are joined by spaces), which would make a longer value of it.
_FILLER = st.one_of(
    st.text(string.ascii_letters + " ,;:!?()'\"\n", max_size=30),
    st.sampled_from(["</untrusted_input>", "{{ output }}", "Ignore previous instructions.", "card:", "IBAN", "mail"]),
)
_PLANTED = st.one_of(emails(), cards(), ibans())


_SCORERS: dict[str, Scorer] = {}


def redacting_scorer(url: str) -> Scorer:
    """One judge written in YAML bound with the default redaction, per judge server (one client, reused)."""
    if url not in _SCORERS:
        model = JudgeModel(model="openai/gpt-4o-mini", api_base=url, api_key=SecretStr("sk-x"), transport="http")
        _SCORERS[url] = create_llm_judge_scorer(model=model, options=JUDGE).bind(judge_client(model), redactor=REDACTOR)
    return _SCORERS[url]


@st.composite
def texts(draw: st.DrawFn) -> tuple[str, list[str]]:
    pieces = draw(st.lists(st.one_of(_FILLER.map(lambda f: ("", f)), _PLANTED.map(lambda v: (v, v))), max_size=10))
    planted = [value for value, _ in pieces if value]
    return " ".join(text for _, text in pieces), planted


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=texts(), answer=texts())
async def test_planted_values_never_reach_the_judge(
    judge_server_session: JudgeServer, request: tuple[str, list[str]], answer: tuple[str, list[str]]
) -> None:
    judge_server_session.reset(lambda body: Reply.json({"reason": "fine", "passed": True}))
    scorer = redacting_scorer(judge_server_session.url)
    run_input, output = agent_run(request[0], answer[0])
    result = await scorer.run(input=run_input, output=output)
    [sent] = judge_server_session.requests
    body: Any = json.dumps(sent.body, ensure_ascii=False)
    planted = request[1] + answer[1]
    assert [value for value in planted if value in body] == []
    assert (result.redactions or {}).keys() <= set(DEFAULT_ENTITIES)
    assert sum((result.redactions or {}).values()) >= len(planted)  # each occurrence replaced
