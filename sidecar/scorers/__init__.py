"""Prebuilt scorers (ports of Mastra's). Importing this package registers their kinds
(``sidecar.scorers.registry``)."""

from sidecar.scorers import (
    completeness,
    content_similarity,
    keyword_coverage,
    prompt_alignment,
    textual_difference,
    tone,
)
from sidecar.scorers.completeness import CompletenessOptions, create_completeness_scorer
from sidecar.scorers.content_similarity import ContentSimilarityOptions, create_content_similarity_scorer
from sidecar.scorers.keyword_coverage import KeywordCoverageOptions, create_keyword_coverage_scorer
from sidecar.scorers.prompt_alignment import PromptAlignmentOptions, create_prompt_alignment_scorer_llm
from sidecar.scorers.registry import ScorerKind, scorer_kind, scorer_kinds
from sidecar.scorers.textual_difference import TextualDifferenceOptions, create_textual_difference_scorer
from sidecar.scorers.tone import ToneOptions, create_tone_scorer

__all__ = [
    "CompletenessOptions",
    "ContentSimilarityOptions",
    "KeywordCoverageOptions",
    "PromptAlignmentOptions",
    "ScorerKind",
    "TextualDifferenceOptions",
    "ToneOptions",
    "completeness",
    "content_similarity",
    "create_completeness_scorer",
    "create_content_similarity_scorer",
    "create_keyword_coverage_scorer",
    "create_prompt_alignment_scorer_llm",
    "create_textual_difference_scorer",
    "create_tone_scorer",
    "keyword_coverage",
    "prompt_alignment",
    "scorer_kind",
    "scorer_kinds",
    "textual_difference",
    "tone",
]
