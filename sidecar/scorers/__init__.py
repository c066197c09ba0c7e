"""Prebuilt scorers (ports of Mastra's). Importing this package registers their kinds
(``sidecar.scorers.registry``)."""

from sidecar.scorers import (
    content_similarity,
    context_precision,
    context_recall,
    context_relevance,
    faithfulness,
    hallucination,
    noise_sensitivity,
    prompt_alignment,
)
from sidecar.scorers.content_similarity import ContentSimilarityOptions, create_content_similarity_scorer
from sidecar.scorers.context_precision import ContextPrecisionOptions, create_context_precision_scorer
from sidecar.scorers.context_recall import ContextRecallOptions, create_context_recall_scorer
from sidecar.scorers.context_relevance import ContextRelevanceOptions, create_context_relevance_scorer_llm
from sidecar.scorers.faithfulness import FaithfulnessOptions, create_faithfulness_scorer
from sidecar.scorers.hallucination import HallucinationOptions, create_hallucination_scorer
from sidecar.scorers.noise_sensitivity import NoiseSensitivityOptions, create_noise_sensitivity_scorer_llm
from sidecar.scorers.prompt_alignment import PromptAlignmentOptions, create_prompt_alignment_scorer_llm
from sidecar.scorers.registry import ScorerKind, scorer_kind, scorer_kinds

__all__ = [
    "ContentSimilarityOptions",
    "ContextPrecisionOptions",
    "ContextRecallOptions",
    "ContextRelevanceOptions",
    "FaithfulnessOptions",
    "HallucinationOptions",
    "NoiseSensitivityOptions",
    "PromptAlignmentOptions",
    "ScorerKind",
    "content_similarity",
    "context_precision",
    "context_recall",
    "context_relevance",
    "create_content_similarity_scorer",
    "create_context_precision_scorer",
    "create_context_recall_scorer",
    "create_context_relevance_scorer_llm",
    "create_faithfulness_scorer",
    "create_hallucination_scorer",
    "create_noise_sensitivity_scorer_llm",
    "create_prompt_alignment_scorer_llm",
    "faithfulness",
    "hallucination",
    "noise_sensitivity",
    "prompt_alignment",
    "scorer_kind",
    "scorer_kinds",
]
