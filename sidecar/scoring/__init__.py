"""The scorer core: a faithful Python port of Mastra's scorer pipeline.

>>> from sidecar.scoring import create_scorer
>>> scorer = create_scorer(id="length").generate_score(lambda ctx: min(len(ctx.run.output) / 100, 1.0))
"""

from sidecar.scoring.agent import AgentMessage, AgentRunInput
from sidecar.scoring.errors import ScorerDefinitionError, ScorerInputError, ScorerRunError
from sidecar.scoring.judge.model import Judge, JudgeModel
from sidecar.scoring.scorer import PromptPreview, Scorer, create_scorer
from sidecar.scoring.steps import (
    LabelledScore,
    NotScorable,
    PromptStep,
    ScorerRun,
    StepContext,
    StepResults,
    not_scorable,
)
from sidecar.scoring.types import (
    JudgeCost,
    JudgeErrorInfo,
    JudgeExecution,
    JudgeExecutionFailure,
    JudgeExecutionSuccess,
    JudgeStepRecord,
    JudgeUsage,
    NotScorableInfo,
    ScorerJudgeResults,
    ScorerRunResult,
    StepName,
)

__all__ = [
    "AgentMessage",
    "AgentRunInput",
    "Judge",
    "JudgeCost",
    "JudgeErrorInfo",
    "JudgeExecution",
    "JudgeExecutionFailure",
    "JudgeExecutionSuccess",
    "JudgeModel",
    "JudgeStepRecord",
    "JudgeUsage",
    "LabelledScore",
    "NotScorable",
    "NotScorableInfo",
    "PromptPreview",
    "PromptStep",
    "Scorer",
    "ScorerDefinitionError",
    "ScorerInputError",
    "ScorerJudgeResults",
    "ScorerRun",
    "ScorerRunError",
    "ScorerRunResult",
    "StepContext",
    "StepName",
    "StepResults",
    "create_scorer",
    "not_scorable",
]
