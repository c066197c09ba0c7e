"""Prebuilt scorers (ports of Mastra's). Importing this package registers their kinds
(``sidecar.scorers.registry``)."""

from sidecar.scorers import (
    answer_relevancy,
    answer_similarity,
    bias,
    content_similarity,
    prompt_alignment,
    rubric,
    summarization,
    toxicity,
)
from sidecar.scorers.answer_relevancy import AnswerRelevancyOptions, create_answer_relevancy_scorer
from sidecar.scorers.answer_similarity import AnswerSimilarityOptions, create_answer_similarity_scorer
from sidecar.scorers.bias import BiasOptions, create_bias_scorer
from sidecar.scorers.content_similarity import ContentSimilarityOptions, create_content_similarity_scorer
from sidecar.scorers.prompt_alignment import PromptAlignmentOptions, create_prompt_alignment_scorer_llm
from sidecar.scorers.registry import ScorerKind, scorer_kind, scorer_kinds
from sidecar.scorers.rubric import RubricCriterion, RubricOptions, create_rubric_scorer
from sidecar.scorers.summarization import SummarizationOptions, create_summarization_scorer
from sidecar.scorers.toxicity import ToxicityOptions, create_toxicity_scorer

__all__ = [
    "AnswerRelevancyOptions",
    "AnswerSimilarityOptions",
    "BiasOptions",
    "ContentSimilarityOptions",
    "PromptAlignmentOptions",
    "RubricCriterion",
    "RubricOptions",
    "ScorerKind",
    "SummarizationOptions",
    "ToxicityOptions",
    "answer_relevancy",
    "answer_similarity",
    "bias",
    "content_similarity",
    "create_answer_relevancy_scorer",
    "create_answer_similarity_scorer",
    "create_bias_scorer",
    "create_content_similarity_scorer",
    "create_prompt_alignment_scorer_llm",
    "create_rubric_scorer",
    "create_summarization_scorer",
    "create_toxicity_scorer",
    "prompt_alignment",
    "rubric",
    "scorer_kind",
    "scorer_kinds",
    "summarization",
    "toxicity",
]
