"""Prompts of the prompt-alignment scorer (after Mastra's, with traced content quoted as untrusted)."""

from __future__ import annotations

from typing import Literal

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "EvaluationMode", "create_analyze_prompt", "create_reason_prompt"]

EvaluationMode = Literal["user", "system", "both"]

INSTRUCTIONS = f"""You are an expert prompt-response alignment evaluator. Your job is to analyze how well an agent's \
response aligns with the prompt it was given in terms of intent, requirements, completeness, and appropriateness.

Key Evaluation Dimensions:
1. **Intent Alignment**: Does the response address the core purpose of the prompt?
2. **Requirements Fulfillment**: Are all explicit and implicit requirements met?
3. **Completeness**: Is the response comprehensive and thorough?
4. **Response Appropriateness**: Does the format, tone, and style match expectations?

Evaluation Guidelines:
- Identify the primary intent and any secondary intents in the prompt
- Extract all explicit requirements (specific tasks, constraints, formats)
- Consider implicit requirements based on context and standard expectations
- Assess whether the response fully addresses the prompt or leaves gaps
- Evaluate if the response format and tone are appropriate for the request
- Be objective and focus on alignment rather than response quality

Score each dimension from 0.0 (completely misaligned) to 1.0 (perfectly aligned).

{UNTRUSTED_CONTENT_NOTICE}"""

_ASPECTS = """1. **Intent Alignment**: identify the primary intent of {target}; \
assess whether the response addresses it; \
score from 0.0 (completely misses it) to 1.0 (perfectly addresses it); give your reasoning.
2. **Requirements Fulfillment**: list every explicit requirement of {target}; check whether each is fulfilled; \
the overall score is based on fulfilled vs. total requirements; give reasoning for each.
3. **Completeness**: is the response comprehensive with respect to {target}? List missing elements; \
score from 0.0 (severely incomplete) to 1.0 (fully complete).
4. **Response Appropriateness**: do the format (list, paragraph, code, …) and tone (formal, casual, technical, …) \
match what {target} asks for? Score from 0.0 to 1.0."""

_DIMENSIONS_JSON = """"intentAlignment": {"score": 0.0-1.0, "primaryIntent": "the main purpose",
    "isAddressed": true/false, "reasoning": "..."},
  "requirementsFulfillment": {"requirements": [{"requirement": "...", "isFulfilled": true/false, "reasoning": "..."}],
    "overallScore": 0.0-1.0},
  "completeness": {"score": 0.0-1.0, "missingElements": ["..."], "reasoning": "..."},
  "responseAppropriateness": {"score": 0.0-1.0, "formatAlignment": true/false, "toneAlignment": true/false,
    "reasoning": "..."}"""


def create_analyze_prompt(
    *,
    user_prompt: str,
    system_prompt: str,
    agent_response: str,
    mode: EvaluationMode,
    with_system_compliance: bool,
    conversation_context: str | None = None,
) -> str:
    blocks: list[str] = []
    if mode == "system":
        blocks.append(
            "Analyze how well the agent's response complies with its system instructions across multiple dimensions."
        )
    else:
        blocks.append("Analyze how well the agent's response aligns with the user's prompt across multiple dimensions.")
    if conversation_context:
        blocks.append("Earlier conversation:\n" + quote_untrusted("conversation", conversation_context))
    if mode != "system" and user_prompt:
        blocks.append("User Prompt:\n" + quote_untrusted("user_prompt", user_prompt))
    if system_prompt and (mode == "system" or with_system_compliance):
        blocks.append("System Instructions:\n" + quote_untrusted("system_prompt", system_prompt))
    blocks.append("Agent Response:\n" + quote_untrusted("agent_response", agent_response))
    target = "the system instructions" if mode == "system" else "the user's prompt"
    blocks.append("Evaluate the following aspects against " + target + ":\n\n" + _ASPECTS.format(target=target))
    if with_system_compliance:
        blocks.append(
            "Then evaluate the same four aspects against the system instructions (behavioural guidelines, "
            'constraints, tone and format rules) and report them under "systemCompliance".'
        )
    shape = "{\n  " + _DIMENSIONS_JSON
    if with_system_compliance:
        shape += ',\n  "systemCompliance": {\n  ' + _DIMENSIONS_JSON + "\n  }"
    shape += ',\n  "overallAssessment": "summary of the alignment"\n}'
    blocks.append("Format your response as a JSON object:\n" + shape)
    return "\n\n".join(blocks)


_WEIGHTS_TEXT: dict[str, tuple[str, str, str, str]] = {
    "user": ("40%", "30%", "20%", "10%"),
    "system": ("35%", "35%", "15%", "15%"),
}


def create_reason_prompt(
    *,
    user_prompt: str,
    system_prompt: str,
    score: float,
    scale: float,
    analysis_text: str,
    mode: EvaluationMode,
) -> str:
    intro = {
        "user": "how well the agent's response addresses the user's prompt",
        "system": "how well the agent's response complies with its system instructions",
        "both": "how well the agent's response addresses the user's prompt (70%) and complies with its system "
        "instructions (30%)",
    }[mode]
    parts = [f"Explain the prompt alignment score based on {intro}."]
    if mode != "system" and user_prompt:
        parts.append("User Prompt:\n" + quote_untrusted("user_prompt", user_prompt))
    if mode != "user" and system_prompt:
        parts.append("System Instructions:\n" + quote_untrusted("system_prompt", system_prompt))
    parts.append(f"Score: {js_number(score)} out of {js_number(scale)}")
    parts.append("Evaluation Breakdown:\n" + analysis_text)
    parts.append(
        "Rules for explanation:\n"
        "- Summarize the key strengths and weaknesses of alignment\n"
        "- Highlight any major misalignments that significantly impacted the score\n"
        "- Be concise but comprehensive in the explanation\n"
        "- Use the given score, don't recalculate"
    )
    parts.append(
        f'Format:\n"The score is {js_number(score)} because {{explanation of alignment strengths and weaknesses '
        'based on the weighted dimensions}"'
    )
    return "\n\n".join(parts)


def weights_text(mode: Literal["user", "system"]) -> tuple[str, str, str, str]:
    return _WEIGHTS_TEXT[mode]
