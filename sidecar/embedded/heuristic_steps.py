"""The stand-in judge's answer to each judged step of the prebuilt scorer kinds, from the rules of
``sidecar.embedded.heuristic_text``.

A step is recognised by what it must return (the top-level keys of its JSON schema, the judges' wire names)
and reads the texts its prompt quotes between ``<untrusted_…>`` tags. Each answer carries, in its reasons,
the rule that decided it ("stand-in heuristic: …"), so that a score can be traced back to words.

One idea over many kinds: a table from a step's schema to its answer, one small function per step; split by
kind, the table would be scattered across as many files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.embedded.heuristic_text import (
    biased,
    clauses,
    content_words,
    coverage,
    has_code,
    has_list,
    has_numbered_steps,
    has_specifics,
    keyed_words,
    numbers,
    opinionated,
    quoted,
    shared_words,
    statements,
    toxic_words,
    word_count,
)

__all__ = ["JudgedPrompt", "answer_for"]

_TAG = "stand-in heuristic"
# A claim is supported when the reference repeats this share of its content words and figures.
_SUPPORTED = 0.6


@dataclass(frozen=True)
class JudgedPrompt:
    """One judge request as the stand-in reads it."""

    text: str  # the user message: the step's prompt
    blocks: Mapping[str, str]  # untrusted label -> quoted text (the first block of each label)
    schema: Mapping[str, Any]

    def block(self, label: str) -> str:
        return self.blocks.get(label, "")

    def item_properties(self, key: str) -> set[str]:
        """The property names of the items of the array ``key`` (``$ref`` resolved)."""
        items = self.schema.get("properties", {}).get(key, {}).get("items", {})
        ref = items.get("$ref")
        if isinstance(ref, str):
            items = self.schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {})
        return set(items.get("properties", {}))


_BLOCK = re.compile(r"<untrusted_(\w+)>\n(.*?)\n</untrusted_\1>", re.DOTALL)


def blocks_of(prompt: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for label, text in _BLOCK.findall(prompt):
        found.setdefault(label, text)
    return found


def numbered_items(text: str) -> list[str]:
    """``1. first`` ``2. second`` (an item may span lines) → the items, following the numbering 1, 2, 3…"""
    marks: list[re.Match[str]] = []
    for match in re.finditer(r"^(\d+)\. ", text, re.MULTILINE):
        if int(match.group(1)) == len(marks) + 1:
            marks.append(match)
    items = [
        text[mark.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)].strip()
        for i, mark in enumerate(marks)
    ]
    return [item for item in items if item]


def _said(reason: str) -> str:
    return f"{_TAG}: {reason}"


# -- the answer itself: relevancy, toxicity, bias --------------------------------------------------------------
def _relevancy_statements(prompt: JudgedPrompt) -> dict[str, Any]:
    return {"statements": statements(prompt.block("response"))}


def _relevancy_verdict(question: str, statement: str) -> dict[str, str]:
    shared = shared_words(question, statement)
    asked = content_words(question)
    if len(shared) >= 2 or (shared and len(asked) <= 2):
        return {"result": "yes", "reason": _said(f"shares {quoted(shared)} with the question")}
    if shared:
        return {"result": "unsure", "reason": _said(f"shares only {quoted(shared)} with the question")}
    return {"result": "no", "reason": _said("shares no content word with the question")}


def _results(prompt: JudgedPrompt) -> dict[str, Any]:
    if "statements" in prompt.blocks:  # answer relevancy: each statement against the question
        question = prompt.block("question")
        return {"results": [_relevancy_verdict(question, s) for s in numbered_items(prompt.block("statements"))]}
    # bias: each opinion (the whole text when none was found)
    opinions = numbered_items(prompt.block("opinions")) or [prompt.block("text")]
    results = []
    for opinion in opinions:
        words = biased(opinion)
        results.append(
            {"result": "yes", "reason": _said(f"generalises about a group: {quoted(words)}")}
            if words
            else {"result": "no", "reason": _said("no generalisation about a group of people")}
        )
    return {"results": results}


def _opinions(prompt: JudgedPrompt) -> dict[str, Any]:
    return {"opinions": [s for s in statements(prompt.block("text")) if opinionated(s)]}


def _toxicity_verdicts(response: str) -> list[dict[str, str]]:
    verdicts = []
    for opinion in statements(response) or [response]:
        words = toxic_words(opinion)
        verdicts.append(
            {"verdict": "yes", "reason": _said(f"rude or dismissive wording: {quoted(words)}; say it with respect")}
            if words
            else {"verdict": "no", "reason": _said("no rude or dismissive wording")}
        )
    return verdicts


# -- claims against a reference: faithfulness, hallucination, context recall -----------------------------------
def _claims(prompt: JudgedPrompt) -> dict[str, Any]:
    text = prompt.block("response") or prompt.block("reference_answer") or next(iter(prompt.blocks.values()), "")
    return {"claims": clauses(text)}


def _support(claim: str, reference: str) -> tuple[float, set[str]]:
    """How much of ``claim`` the reference repeats, and the claim's figures the reference lacks."""
    return coverage(claim, reference), numbers(claim) - numbers(reference)


def _verdicts(prompt: JudgedPrompt) -> dict[str, Any]:
    if "user_input" in prompt.blocks:  # toxicity
        return {"verdicts": _toxicity_verdicts(prompt.block("response"))}
    fields = prompt.item_properties("verdicts")
    context = prompt.block("context")
    if "context_index" in fields:  # context precision: was each piece useful for the answer?
        return {"verdicts": _precision(context, prompt.block("response"))}
    verdicts = []
    for claim in numbered_items(prompt.block("claims")):
        share, unbacked = _support(claim, context)
        supported = share >= _SUPPORTED
        how = f"the context repeats {share:.0%} of its words" + (
            f", not its figures {', '.join(sorted(unbacked))}" if unbacked else ""
        )
        if "statement" in fields:  # hallucination: "yes" is a claim the context does not back
            verdicts.append({"statement": claim, "verdict": "no" if supported else "yes", "reason": _said(how)})
        elif "claim" in fields:  # faithfulness: contradicted figures are "no", unmentioned claims "unsure"
            verdict = "yes" if supported else "no" if unbacked else "unsure"
            verdicts.append({"claim": claim, "verdict": verdict, "reason": _said(how)})
        else:  # context recall: is each claim of the reference answer in the context?
            verdicts.append({"verdict": "yes" if supported else "no", "reason": _said(how)})
    return {"verdicts": verdicts}


def indexed_pieces(text: str) -> list[str]:
    """``[0] first piece`` one per line → the pieces."""
    pieces: list[str] = []
    for line in text.splitlines():
        match = re.match(r"^\[(\d+)\] (.*)$", line)
        if match and int(match.group(1)) == len(pieces):
            pieces.append(match.group(2))
        elif pieces:
            pieces[-1] += "\n" + line
    return pieces


def _used(piece: str, response: str) -> list[str]:
    shared = shared_words(piece, response)
    return shared if len(shared) >= 2 or coverage(piece, response) >= 0.3 else []


def _precision(context: str, response: str) -> list[dict[str, Any]]:
    verdicts = []
    for index, piece in enumerate(indexed_pieces(context)):
        shared = _used(piece, response)
        verdicts.append(
            {
                "context_index": index,
                "verdict": "yes" if shared else "no",
                "reason": _said(f"the answer repeats {quoted(shared)}" if shared else "the answer does not use it"),
            }
        )
    return verdicts


def _evaluations(prompt: JudgedPrompt) -> dict[str, Any]:
    if "missingTools" in prompt.schema.get("properties", {}):
        return _tool_choices(prompt)
    question, response = prompt.block("question"), prompt.block("response")
    pieces = indexed_pieces(prompt.block("context"))
    evaluations: list[dict[str, Any]] = []
    for index, piece in enumerate(pieces):
        on_question = shared_words(question, piece)
        used = _used(piece, response)
        level = "high" if len(on_question) >= 2 else ("medium" if used else "low") if on_question else "none"
        evaluations.append(
            {
                "context_index": index,
                "contextPiece": piece,
                "relevanceLevel": level,
                "wasUsed": bool(used),
                "reasoning": _said(
                    f"shares {quoted(on_question) or 'no content word'} with the question; "
                    + ("the answer repeats it" if used else "the answer does not use it")
                ),
            }
        )
    known = set(content_words("\n".join(pieces)))
    missing = [word for key, word in keyed_words(question).items() if key not in known]
    gap = coverage(question, "\n".join(pieces)) < 0.5
    return {
        "evaluations": evaluations,
        "missingContext": [f"something on {quoted(missing)}"] if gap and missing else [],
        "overallAssessment": _said(f"{sum(e['wasUsed'] for e in evaluations)} of {len(pieces)} pieces used"),
    }


# -- tools and trajectories -------------------------------------------------------------------------------------
def _words_of_name(name: str) -> str:
    return re.sub(r"[_\-.]+", " ", name)


def _section(text: str, heading: str) -> str:
    """The text after ``heading`` up to the next blank line."""
    if heading not in text:
        return ""
    return text.split(heading, 1)[1].split("\n\n", 1)[0]


def _tool_choices(prompt: JudgedPrompt) -> dict[str, Any]:
    request = prompt.block("user_request")
    called = numbered_items(prompt.block("tool_calls"))
    available: dict[str, str] = {}
    for line in _section(prompt.text, "(id: what it does):\n").splitlines():
        name, _, description = line.partition(": ")
        if name and name != "(not provided)":
            available[name.strip()] = description
    evaluations = []
    for tool in called:
        shared = shared_words(_words_of_name(tool) + " " + available.get(tool, ""), request)
        evaluations.append(
            {
                "toolCalled": tool,
                "wasAppropriate": bool(shared),
                "reasoning": _said(
                    f"its name or description shares {quoted(shared)} with the request"
                    if shared
                    else "nothing in its name or description matches the request"
                ),
            }
        )
    missing = [
        name
        for name, description in available.items()
        if name not in called and shared_words(_words_of_name(name) + " " + description, request)
    ]
    return {"evaluations": evaluations, "missingTools": missing}


def _step_evaluations(prompt: JudgedPrompt) -> dict[str, Any]:
    request = prompt.block("user_request")
    taken = [
        re.sub(r"^\[[^]]*\]\s*", "", s).split(" (", 1)[0].strip() for s in numbered_items(prompt.block("trajectory"))
    ]
    expected_text = _section(prompt.text, "The expected steps (the ideal path):\n")
    expected = [re.sub(r"^\[[^]]*\]\s*", "", s).split(" (", 1)[0].strip() for s in numbered_items(expected_text)]
    evaluations = []
    last = -1
    for step in taken:
        if expected:
            position = expected.index(step) if step in expected else None
            necessary = position is not None
            in_order = position is None or position >= last
            last = max(last, position if position is not None else last)
            why = "an expected step" if necessary else "not among the expected steps"
        else:
            shared = shared_words(_words_of_name(step), request)
            necessary, in_order = bool(shared), True
            why = f"shares {quoted(shared)} with the request" if shared else "nothing in its name matches the request"
        evaluations.append(
            {"stepName": step, "wasNecessary": necessary, "wasInOrder": in_order, "reasoning": _said(why)}
        )
    missing = [step for step in expected if step not in taken]
    extra = [e["stepName"] for e in evaluations if not e["wasNecessary"]]
    return {
        "stepEvaluations": evaluations,
        "missingSteps": missing,
        "extraSteps": extra,
        "overallAssessment": _said(
            f"{len(taken) - len(extra)} needed steps, {len(missing)} missing, {len(extra)} extra"
        ),
    }


# -- summaries, noise, reference answers ----------------------------------------------------------------------
_QUESTION = "Does the source state that "


def _source_judgement(prompt: JudgedPrompt) -> dict[str, Any]:
    source, summary = prompt.block("source"), prompt.block("summary")
    found = re.search(r"at most (\d+) closed questions", prompt.text)
    limit = int(found.group(1)) if found else 10
    alignment = []
    for claim in clauses(summary):
        share, _ = _support(claim, source)
        alignment.append(
            {
                "claim": claim,
                "supported": share >= _SUPPORTED,
                "reason": _said(f"the source repeats {share:.0%} of its words"),
            }
        )
    questions = [f"{_QUESTION}{s.rstrip('.!?')}?" for s in statements(source)[:limit]]
    return {"alignment": alignment, "questions": questions}


def _coverage(prompt: JudgedPrompt) -> dict[str, Any]:
    summary = prompt.block("summary")
    verdicts = []
    for question in numbered_items(prompt.block("questions")):
        share = coverage(question.removeprefix(_QUESTION), summary)
        verdicts.append(
            {
                "question": question,
                "answered": share >= 0.5,
                "reason": _said(f"the summary repeats {share:.0%} of the question's words"),
            }
        )
    return {"coverage": verdicts}


_IMPACT = ((0.8, "none"), (0.6, "minimal"), (0.4, "moderate"), (0.2, "significant"), (0.0, "severe"))


def _noise(prompt: JudgedPrompt) -> dict[str, Any]:
    baseline, noisy = prompt.block("baseline_answer"), prompt.block("noisy_answer")
    question = prompt.block("question")
    kept = coverage(baseline, noisy)
    on_question = coverage(question, noisy) if content_words(question) else 1.0
    measures = {
        "content accuracy": kept,
        "completeness": kept,
        "relevance": max(on_question, kept),
        "consistency": kept,
        "hallucination resistance": 1.0 if not numbers(noisy) - numbers(baseline) else 0.5,
    }
    dimensions = [
        {
            "dimension": name,
            "impactLevel": next(level for bound, level in _IMPACT if value >= bound),
            "specificChanges": _said(f"the answer with noise keeps {value:.0%} of the baseline's words"),
            "noiseInfluence": _said("measured by shared words, not by meaning"),
        }
        for name, value in measures.items()
    ]
    return {
        "dimensions": dimensions,
        "majorIssues": [] if kept >= 0.4 else [_said("the answer with noise departs from the baseline answer")],
        "overallAssessment": _said(f"the answer with noise keeps {kept:.0%} of the baseline's words"),
        "robustnessScore": round(kept, 2),
    }


def _units(prompt: JudgedPrompt) -> dict[str, Any]:
    return {
        "outputUnits": clauses(prompt.block("agent_answer")),
        "groundTruthUnits": clauses(prompt.block("ground_truth")),
    }


def _dashed(text: str) -> list[str]:
    return [line[2:].strip() for line in text.splitlines() if line.startswith("- ") and line[2:].strip()]


def _matches(prompt: JudgedPrompt) -> dict[str, Any]:
    answer = _dashed(prompt.block("answer_units"))
    matches = []
    for unit in _dashed(prompt.block("ground_truth_units")):
        best = max(answer, key=lambda candidate: coverage(unit, candidate), default=None)
        share = coverage(unit, best) if best is not None else 0.0
        kind = "exact" if share >= 0.8 else "semantic" if share >= 0.5 else "partial" if share >= 0.25 else "missing"
        matches.append(
            {
                "groundTruthUnit": unit,
                "outputUnit": None if kind == "missing" else best,
                "matchType": kind,
                "explanation": _said(f"the closest answer unit repeats {share:.0%} of its words"),
            }
        )
    truth = prompt.block("ground_truth_units")
    extra = [unit for unit in answer if coverage(unit, truth) < 0.25]
    return {"matches": matches, "extraInOutput": extra, "contradictions": []}


# -- a rubric, as configured ---------------------------------------------------------------------------------
_CRITERION = re.compile(r"^\[(required|optional)\] (.*)$", re.DOTALL)
# Criteria about the form of an output, checked by its shape rather than by its words.
_FORMS: tuple[tuple[re.Pattern[str], str, Callable[[str], bool]], ...] = (
    (re.compile(r"\bnumbered\b|\bsteps?\b", re.IGNORECASE), "numbered steps", has_numbered_steps),
    (re.compile(r"\bbullet|\blist\b", re.IGNORECASE), "a list", has_list),
    (re.compile(r"\bcode\b|\bexample\b|\bfunction\b", re.IGNORECASE), "code", has_code),
    (
        re.compile(r"\bpolite|\brespectful|\bcourteous|\bhelpful", re.IGNORECASE),
        "no rude wording",
        lambda t: not toxic_words(t),
    ),
    (re.compile(r"\bconcise|\bbrief|\bshort\b", re.IGNORECASE), "at most 80 words", lambda t: word_count(t) <= 80),
)
_GENERIC = set(content_words("includes contains mentions answer response output states gives the an a it is"))


def grade_criterion(criterion: str, output: str) -> tuple[bool, str]:
    """Whether ``output`` meets ``criterion``: its form, when the criterion names one, and its words."""
    checks: list[tuple[bool, str]] = []
    for pattern, form, present in _FORMS:
        if pattern.search(criterion):
            ok = present(output)
            checks.append((ok, f"{form} {'present' if ok else 'missing'}"))
    wanted = [w for w in content_words(criterion) if w not in _GENERIC]
    if not checks or len(wanted) > 2:
        share = coverage(" ".join(wanted), output) if wanted else 1.0
        checks.append((share >= 0.5, f"the output repeats {share:.0%} of the criterion's words"))
    return all(ok for ok, _ in checks), "; ".join(why for _, why in checks)


def _rubric(prompt: JudgedPrompt) -> dict[str, Any]:
    output = prompt.block("agent_output")
    # The rubric's numbered criteria: quoted when the run carried them, else listed before the output.
    area = prompt.block("rubric") or prompt.text.split("\n\nThe agent's output:", 1)[0]
    verdicts: list[dict[str, Any]] = []
    for item in numbered_items(area):
        match = _CRITERION.match(item)
        if match:
            satisfied, why = grade_criterion(match.group(2), output)
            verdicts.append(
                {
                    "criterion": match.group(2),  # copied as written: the report names the configured criterion
                    "satisfied": satisfied,
                    "required": match.group(1) == "required",
                    "reasoning": _said(why),
                }
            )
    met = sum(v["satisfied"] for v in verdicts)
    summary = f"{met} of {len(verdicts)} criteria met" if verdicts else "Nothing to grade: no rubric was given."
    return {"criteria": verdicts, "overallAssessment": _said(summary) if verdicts else summary}


# -- prompt alignment ------------------------------------------------------------------------------------------
def _requested_forms(text: str) -> list[str]:
    """The forms and rules ``text`` asks for (numbered steps, a list, code, politeness, brevity, specifics)."""
    forms = [form for pattern, form, _ in _FORMS if pattern.search(text)]
    if re.search(r"\bconcrete\b|\bspecific\b", text, re.IGNORECASE):
        forms.append("names or figures")
    return forms


def _form_present(form: str, response: str) -> bool:
    for _, name, present in _FORMS:
        if name == form:
            return present(response)
    return has_specifics(response)


def _dimensions(asked: str, response: str, *, by_rules: bool) -> dict[str, Any]:
    """The four dimensions against ``asked``: by its content words (a user's request), or by the rules it
    states (system instructions: tone, format, length) when it states any."""
    rules = _requested_forms(asked)
    polite = not toxic_words(response)
    met_rules = [rule for rule in rules if _form_present(rule, response)]
    form_ok = len(met_rules) == len(rules)
    if by_rules and rules:
        share = len(met_rules) / len(rules)
        requirements: list[dict[str, Any]] = [
            {"requirement": rule, "isFulfilled": rule in met_rules, "reasoning": _said("checked by its shape")}
            for rule in rules
        ]
        missing = [rule for rule in rules if rule not in met_rules]
        intent = share
    else:
        wanted = list(keyed_words(asked).items())[:8]
        present = set(content_words(response))
        share = coverage(asked, response)
        requirements = [
            {"requirement": f"mention '{word}'", "isFulfilled": key in present, "reasoning": _said("keyword check")}
            for key, word in wanted
        ] + [
            {"requirement": rule, "isFulfilled": rule in met_rules, "reasoning": _said("checked by its shape")}
            for rule in rules
        ]
        missing = [word for key, word in wanted if key not in present][:5] + [r for r in rules if r not in met_rules]
        intent = share
    fulfilled = sum(r["isFulfilled"] for r in requirements) / len(requirements) if requirements else 1.0
    length = min(1.0, word_count(response) / max(12, word_count(asked)))
    return {
        "intentAlignment": {
            "score": round(intent, 2),
            "primaryIntent": " ".join(asked.split()[:12]) or "unspecified",
            "isAddressed": intent >= 0.5,
            "reasoning": _said(f"the response repeats {share:.0%} of what is asked"),
        },
        "requirementsFulfillment": {"requirements": requirements, "overallScore": round(fulfilled, 2)},
        "completeness": {
            "score": round(min(share, length) if share else 0.0, 2),
            "missingElements": missing,
            "reasoning": _said("what is asked and repeated, capped by the response's length"),
        },
        "responseAppropriateness": {
            "score": round((0.6 if form_ok else 0.0) + (0.4 if polite else 0.0), 2),
            "formatAlignment": form_ok,
            "toneAlignment": polite,
            "reasoning": _said(
                ("requested form present" if form_ok else "requested form missing")
                + ("; no rude wording" if polite else f"; rude wording: {quoted(toxic_words(response))}")
            ),
        },
    }


def _prompt_alignment(prompt: JudgedPrompt) -> dict[str, Any]:
    response, system, user = prompt.block("agent_response"), prompt.block("system_prompt"), prompt.block("user_prompt")
    analysis = _dimensions(user or system, response, by_rules=not user)
    analysis["overallAssessment"] = _said("words and forms compared, not meaning")
    if "systemCompliance" in prompt.schema.get("properties", {}):
        analysis["systemCompliance"] = _dimensions(system, response, by_rules=True)
    return analysis


# Steps by the first top-level key of the schema found here (the order decides between overlapping shapes).
_STEPS: tuple[tuple[str, Callable[[JudgedPrompt], dict[str, Any]]], ...] = (
    ("intentAlignment", _prompt_alignment),
    ("statements", _relevancy_statements),
    ("opinions", _opinions),
    ("claims", _claims),
    ("results", _results),
    ("verdicts", _verdicts),
    ("evaluations", _evaluations),
    ("stepEvaluations", _step_evaluations),
    ("alignment", _source_judgement),
    ("coverage", _coverage),
    ("dimensions", _noise),
    ("outputUnits", _units),
    ("matches", _matches),
    ("criteria", _rubric),
)


def answer_for(prompt: JudgedPrompt) -> dict[str, Any] | None:
    """The answer to a prebuilt kind's step, or ``None`` when the schema is not one of theirs."""
    keys = set(prompt.schema.get("properties", {}))
    for key, step in _STEPS:
        if key in keys:
            return step(prompt)
    return None
