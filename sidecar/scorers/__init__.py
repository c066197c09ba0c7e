"""Prebuilt scorers (ports of Mastra's), one folder per family as docs/scorers.md lists them: ``quality``,
``rag`` (context and grounding), ``tool_use`` (tools and trajectory), ``conversation``, ``code`` and ``custom``
(judges written in YAML). The modules at this level are what several families read from a run (its text,
tool calls, retrieved context, verdict types, options). Importing this package registers every kind
(``sidecar.scorers.registry``)."""

from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.code.completeness import CompletenessOptions, create_completeness_scorer
from sidecar.scorers.code.content_similarity import ContentSimilarityOptions, create_content_similarity_scorer
from sidecar.scorers.code.keyword_coverage import KeywordCoverageOptions, create_keyword_coverage_scorer
from sidecar.scorers.code.textual_difference import TextualDifferenceOptions, create_textual_difference_scorer
from sidecar.scorers.code.tone import ToneOptions, create_tone_scorer
from sidecar.scorers.conversation.conversation_completeness import (
    ConversationCompletenessOptions,
    create_conversation_completeness_scorer,
)
from sidecar.scorers.conversation.knowledge_retention import (
    KnowledgeRetentionOptions,
    create_knowledge_retention_scorer,
)
from sidecar.scorers.conversation.role_adherence import RoleAdherenceOptions, create_role_adherence_scorer
from sidecar.scorers.conversation.user_frustration import UserFrustrationOptions, create_user_frustration_scorer
from sidecar.scorers.custom.llm_judge import LlmJudgeOptions, create_llm_judge_scorer
from sidecar.scorers.quality.answer_relevancy import AnswerRelevancyOptions, create_answer_relevancy_scorer
from sidecar.scorers.quality.answer_similarity import AnswerSimilarityOptions, create_answer_similarity_scorer
from sidecar.scorers.quality.bias import BiasOptions, create_bias_scorer
from sidecar.scorers.quality.prompt_alignment import PromptAlignmentOptions, create_prompt_alignment_scorer_llm
from sidecar.scorers.quality.rubric import RubricCriterion, RubricOptions, create_rubric_scorer
from sidecar.scorers.quality.summarization import SummarizationOptions, create_summarization_scorer
from sidecar.scorers.quality.toxicity import ToxicityOptions, create_toxicity_scorer
from sidecar.scorers.rag.context_precision import ContextPrecisionOptions, create_context_precision_scorer
from sidecar.scorers.rag.context_recall import ContextRecallOptions, create_context_recall_scorer
from sidecar.scorers.rag.context_relevance import ContextRelevanceOptions, create_context_relevance_scorer_llm
from sidecar.scorers.rag.faithfulness import FaithfulnessOptions, create_faithfulness_scorer
from sidecar.scorers.rag.hallucination import HallucinationOptions, create_hallucination_scorer
from sidecar.scorers.rag.noise_sensitivity import NoiseSensitivityOptions, _Options, create_noise_sensitivity_scorer_llm
from sidecar.scorers.registry import ScorerKind, scorer_kind
from sidecar.scorers.tool_use.checks import ChecksOptions, create_checks_scorer
from sidecar.scorers.tool_use.tool_call_accuracy import ToolCallAccuracyOptions, create_tool_call_accuracy_scorer_code
from sidecar.scorers.tool_use.tool_call_accuracy_llm import (
    ToolCallAccuracyLLMOptions,
    create_tool_call_accuracy_scorer_llm,
)
from sidecar.scorers.tool_use.trajectory_accuracy import (
    TrajectoryAccuracyOptions,
    TrajectoryComparisonOptions,
    create_trajectory_accuracy_scorer_code,
)
from sidecar.scorers.tool_use.trajectory_llm import TrajectoryLLMOptions, create_trajectory_accuracy_scorer_llm

__all__ = [
    "AnswerRelevancyOptions",
    "AnswerSimilarityOptions",
    "BiasOptions",
    "ChecksOptions",
    "CompletenessOptions",
    "ContentSimilarityOptions",
    "ContextPrecisionOptions",
    "ContextRecallOptions",
    "ContextRelevanceOptions",
    "ConversationCompletenessOptions",
    "FaithfulnessOptions",
    "HallucinationOptions",
    "KeywordCoverageOptions",
    "KnowledgeRetentionOptions",
    "LlmJudgeOptions",
    "NoiseSensitivityOptions",
    "PromptAlignmentOptions",
    "RoleAdherenceOptions",
    "RubricCriterion",
    "RubricOptions",
    "ScorerKind",
    "SummarizationOptions",
    "TextualDifferenceOptions",
    "ToneOptions",
    "ToolCallAccuracyLLMOptions",
    "ToolCallAccuracyOptions",
    "ToxicityOptions",
    "TrajectoryAccuracyOptions",
    "TrajectoryComparisonOptions",
    "TrajectoryLLMOptions",
    "UserFrustrationOptions",
    "_Options",
    "answer_relevancy",
    "answer_similarity",
    "bias",
    "checks",
    "completeness",
    "content_similarity",
    "context_precision",
    "context_recall",
    "context_relevance",
    "conversation_completeness",
    "create_answer_relevancy_scorer",
    "create_answer_similarity_scorer",
    "create_bias_scorer",
    "create_checks_scorer",
    "create_completeness_scorer",
    "create_content_similarity_scorer",
    "create_context_precision_scorer",
    "create_context_recall_scorer",
    "create_context_relevance_scorer_llm",
    "create_conversation_completeness_scorer",
    "create_faithfulness_scorer",
    "create_hallucination_scorer",
    "create_keyword_coverage_scorer",
    "create_knowledge_retention_scorer",
    "create_llm_judge_scorer",
    "create_noise_sensitivity_scorer_llm",
    "create_prompt_alignment_scorer_llm",
    "create_role_adherence_scorer",
    "create_rubric_scorer",
    "create_summarization_scorer",
    "create_textual_difference_scorer",
    "create_tone_scorer",
    "create_tool_call_accuracy_scorer_code",
    "create_tool_call_accuracy_scorer_llm",
    "create_toxicity_scorer",
    "create_trajectory_accuracy_scorer_code",
    "create_trajectory_accuracy_scorer_llm",
    "create_user_frustration_scorer",
    "faithfulness",
    "hallucination",
    "keyword_coverage",
    "knowledge_retention",
    "llm_judge",
    "noise_sensitivity",
    "prompt_alignment",
    "role_adherence",
    "rubric",
    "scorer_kind",
    "scorer_kinds",
    "summarization",
    "textual_difference",
    "tone",
    "tool_call_accuracy",
    "tool_call_accuracy_llm",
    "toxicity",
    "trajectory_accuracy",
    "trajectory_llm",
    "user_frustration",
]
