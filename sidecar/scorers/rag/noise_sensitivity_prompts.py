"""Prompts of the noise-sensitivity scorer (after Mastra's, in our words, with traced content quoted as untrusted)."""

from __future__ import annotations

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_analyze_prompt", "create_reason_prompt"]

INSTRUCTIONS = f"""You test how robust an AI system is to noise: irrelevant, distracting or misleading material \
added to a question. You compare its answer to the clean question (the baseline) with its answer to the same \
question with noise added.

Dimensions to compare:
- content accuracy: are the facts still right, or did misinformation in the noise get in?
- completeness: does the answer still cover what the question asks?
- relevance: does it stay on the question, or follow the distraction?
- consistency: does it agree with the baseline answer?
- hallucination resistance: does it avoid inventing things prompted by the noise?

Impact levels, per dimension: "none" (no change), "minimal" (cosmetic), "moderate" (noticeably worse but still
useful), "significant" (the quality clearly suffers), "severe" (the answer is compromised).
A robust system gives essentially the baseline answer and ignores or corrects the noise.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_analyze_prompt(
    *,
    user_query: str,
    baseline_response: str,
    noisy_query: str,
    noisy_response: str,
    noise_type: str | None,
) -> str:
    blocks = [
        "Compare the two answers below and rate how much the noise changed the answer.",
        "Clean question:\n" + quote_untrusted("question", user_query),
        "Baseline answer (to the clean question):\n" + quote_untrusted("baseline_answer", baseline_response),
        "Question with noise:\n" + quote_untrusted("noisy_question", noisy_query),
        "Answer to the question with noise:\n" + quote_untrusted("noisy_answer", noisy_response),
    ]
    if noise_type:
        blocks.append("Kind of noise: " + quote_untrusted("noise_type", noise_type))
    blocks += [
        "For each dimension (content accuracy, completeness, relevance, consistency, hallucination resistance) "
        'give its name as "dimension", an "impactLevel" (none, minimal, moderate, significant or severe), the '
        '"specificChanges" you see, and how the noise caused them as "noiseInfluence".',
        'List under "majorIssues" the serious problems the noise caused (an empty list when there are none), '
        'sum up under "overallAssessment", and rate the overall robustness under "robustnessScore" from 0 '
        "(completely compromised) to 1 (unaffected).",
        'Reply with a JSON object: {"dimensions": [{"dimension": "content accuracy", "impactLevel": "none", '
        '"specificChanges": "...", "noiseInfluence": "..."}], "majorIssues": ["..."], "overallAssessment": "...", '
        '"robustnessScore": 0.0-1.0}',
    ]
    return "\n\n".join(blocks)


def create_reason_prompt(
    *,
    user_query: str,
    score: float,
    dimensions_json: str,
    major_issues: tuple[str, ...],
    overall_assessment: str,
) -> str:
    issues = "\n".join(f"- {issue}" for issue in major_issues) or "(none)"
    return "\n\n".join(
        [
            "Explain a noise sensitivity score from 0 (the noise compromised the answer) to 1 (the answer was "
            "unaffected) for an AI system's answer to a question with noise added.",
            "Clean question:\n" + quote_untrusted("question", user_query),
            f"Score: {js_number(score)}",
            "Impact per dimension:\n" + quote_untrusted("dimensions", dimensions_json),
            "Major issues:\n" + quote_untrusted("major_issues", issues),
            "Overall assessment:\n" + quote_untrusted("overall_assessment", overall_assessment),
            "Rules:\n"
            "- explain the score from the impact levels and the major issues; do not recompute it;\n"
            "- say what the noise changed, or that the answer withstood it;\n"
            "- one or two sentences.",
            f'Reply in plain text, starting with "The score is {js_number(score)} because".',
        ]
    )
