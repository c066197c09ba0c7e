"""``create_scorer`` and the immutable ``Scorer``: preprocess → analyze → generate_score → generate_reason."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pydantic import BaseModel

from sidecar.scoring.errors import ScorerDefinitionError, ScorerInputError, ScorerRunError
from sidecar.scoring.judge.client import JudgeClient, default_judge_client
from sidecar.scoring.judge.model import Judge, JudgeModel
from sidecar.scoring.judge.structured import execute_prompt_step
from sidecar.scoring.redaction import RedactedRun, RedactionError, RunRedactor
from sidecar.scoring.steps import (
    FunctionStep,
    GeneratedScore,
    LabelledScore,
    NotScorable,
    PromptFactory,
    PromptStep,
    ScorerRun,
    StepContext,
    StepFunction,
    StepResults,
)
from sidecar.scoring.types import (
    STEP_NAMES,
    NotScorableInfo,
    ScorerJudgeResults,
    ScorerRunResult,
    StepName,
)

__all__ = ["JudgeLike", "PromptPreview", "Scorer", "create_scorer"]

JudgeLike: TypeAlias = Judge | Mapping[str, Any] | str | JudgeModel
Step: TypeAlias = FunctionStep | PromptStep[Any]

_NO_JUDGE_RESULTS = ScorerJudgeResults()  # immutable: shared by every run's first judged step

_PROMPT_FIELD: dict[StepName, str] = {
    "preprocess": "preprocess_prompt",
    "analyze": "analyze_prompt",
    "generate_score": "generate_score_prompt",
    "generate_reason": "generate_reason_prompt",
}


def _coerce_judge(judge: JudgeLike | None) -> Judge | None:
    if judge is None or isinstance(judge, Judge):
        return judge
    if isinstance(judge, str | JudgeModel):
        return Judge.of(judge)
    if isinstance(judge, Mapping):
        model = judge.get("model")
        if model is None:
            raise ScorerDefinitionError("a judge needs a model")
        return Judge.of(model, judge.get("instructions"))
    raise ScorerDefinitionError(f"a judge is a Judge, a model id or a mapping, not {type(judge).__name__}")


# Never awaitable (exact types, not subclasses): most prompts and step results skip inspect.isawaitable.
_PLAIN = frozenset({str, float, int, bool, type(None), dict, list, tuple})


async def _resolve(value: Any) -> Any:
    if type(value) in _PLAIN:
        return value
    return await value if inspect.isawaitable(value) else value


@dataclass(frozen=True, slots=True)
class Scorer:
    """A scoring pipeline. Builders return new scorers; ``run`` never mutates the scorer.

    ``bind(*clients)`` gives every prompt step the judge client to call (with its limits, breaker, spend
    cap and metrics): the runtime binds every scorer it runs. An unbound scorer (run from a script) calls
    its judges through a plain shared client per judge model, with no limits. ``bind(..., redactor=...)``
    also takes the personal data out of every run before any step reads it (``sidecar.scoring.redaction``).
    """

    id: str
    name: str
    description: str
    judge: Judge | None
    steps: tuple[tuple[StepName, Step], ...] = ()
    version: str = "1"
    # The judge clients of a bound scorer, by JudgeModel.cache_key() (None: unbound).
    clients: Mapping[str, JudgeClient] | None = field(default=None, repr=False, compare=False)
    # What takes the personal data out of a run before its steps read it (None: the run as traced). Only a
    # scorer with judge steps is given one: the others never send a run out of the process.
    redactor: RunRedactor | None = field(default=None, repr=False, compare=False)
    # Derived once: every run's score id hashes it.
    fingerprint: str = field(init=False, repr=False, compare=False)
    # Derived once, checked by every run.
    _has_score_step: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fingerprint", self._fingerprint())
        object.__setattr__(self, "_has_score_step", any(name == "generate_score" for name, _ in self.steps))

    # -- builder -----------------------------------------------------------------------------------
    def _with(
        self,
        name: StepName,
        step: StepFunction | PromptStep[Any] | None,
        description: str | None,
        create_prompt: PromptFactory | None,
        output_schema: type[BaseModel] | Callable[[StepContext], type[BaseModel]] | None,
        judge: JudgeLike | None,
    ) -> Scorer:
        if any(existing == name for existing, _ in self.steps):
            raise ScorerDefinitionError(f"scorer {self.id!r} already has a {name} step")
        built: Step
        if isinstance(step, PromptStep):
            built = step
        elif step is not None:
            if not callable(step):
                raise ScorerDefinitionError(f"{name}: a step is a function or a prompt step")
            built = FunctionStep(step)
        else:
            if create_prompt is None:
                raise ScorerDefinitionError(f"{name}: pass a function, or description and create_prompt")
            built = PromptStep(
                description=description or name,
                create_prompt=create_prompt,
                output_schema=output_schema,
                judge=_coerce_judge(judge),
            )
        if isinstance(built, PromptStep):
            if name in ("preprocess", "analyze") and built.output_schema is None:
                raise ScorerDefinitionError(f"{name}: a prompt step needs an output_schema")
            if name == "generate_score":
                built = PromptStep(built.description, built.create_prompt, GeneratedScore, built.judge)
            if name == "generate_reason":
                built = PromptStep(built.description, built.create_prompt, None, built.judge)
        ordered = sorted((*self.steps, (name, built)), key=lambda item: STEP_NAMES.index(item[0]))
        # A new step may need a judge the binding lacks: builders return an unbound scorer.
        return Scorer(self.id, self.name, self.description, self.judge, tuple(ordered), self.version)

    def preprocess(
        self,
        step: StepFunction | PromptStep[Any] | None = None,
        /,
        *,
        description: str | None = None,
        create_prompt: PromptFactory | None = None,
        output_schema: type[BaseModel] | Callable[[StepContext], type[BaseModel]] | None = None,
        judge: JudgeLike | None = None,
    ) -> Scorer:
        return self._with("preprocess", step, description, create_prompt, output_schema, judge)

    def analyze(
        self,
        step: StepFunction | PromptStep[Any] | None = None,
        /,
        *,
        description: str | None = None,
        create_prompt: PromptFactory | None = None,
        output_schema: type[BaseModel] | Callable[[StepContext], type[BaseModel]] | None = None,
        judge: JudgeLike | None = None,
    ) -> Scorer:
        return self._with("analyze", step, description, create_prompt, output_schema, judge)

    def generate_score(
        self,
        step: StepFunction | PromptStep[Any] | None = None,
        /,
        *,
        description: str | None = None,
        create_prompt: PromptFactory | None = None,
        judge: JudgeLike | None = None,
    ) -> Scorer:
        return self._with("generate_score", step, description, create_prompt, None, judge)

    def generate_reason(
        self,
        step: StepFunction | PromptStep[Any] | None = None,
        /,
        *,
        description: str | None = None,
        create_prompt: PromptFactory | None = None,
        judge: JudgeLike | None = None,
    ) -> Scorer:
        return self._with("generate_reason", step, description, create_prompt, None, judge)

    def with_version(self, version: str) -> Scorer:
        """Name a behaviour change: a new version gives new score ids for the same spans."""
        return Scorer(
            self.id, self.name, self.description, self.judge, self.steps, version, self.clients, self.redactor
        )

    # -- judges --------------------------------------------------------------------------------------
    def judge_models(self) -> dict[StepName, JudgeModel]:
        """The judge model each prompt step calls (the step's judge over the scorer's, field by field)."""
        models: dict[StepName, JudgeModel] = {}
        for name, step in self.steps:
            if isinstance(step, PromptStep):
                judge = self.judge.merged(step.judge) if self.judge is not None else step.judge
                if judge is None:
                    raise ScorerDefinitionError(f"{name}: a prompt step needs a judge (on the scorer or the step)")
                models[name] = judge.model
        return models

    def bind(self, *clients: JudgeClient, redactor: RunRedactor | None = None) -> Scorer:
        """This scorer with every prompt step calling the given client of its judge model.

        Each step's judge model must equal one client's model (first match wins): a step whose judge has no
        client is a ``ScorerDefinitionError`` here, never an unlimited call later. ``redactor``: what every run
        goes through before the first step (ignored by a scorer without judge steps: it sends nothing out).
        """
        by_key: dict[str, JudgeClient] = {}
        for client in clients:
            by_key.setdefault(client.model.cache_key(), client)
        for step, model in self.judge_models().items():
            if model.cache_key() not in by_key:
                raise ScorerDefinitionError(
                    f"scorer {self.id!r}: step {step} calls judge model {model.model!r}, which has no client "
                    f"(bound: {', '.join(sorted(c.model.model for c in clients)) or 'none'})"
                )
        used = {model.cache_key() for model in self.judge_models().values()}
        return dataclasses.replace(
            self,
            clients={k: c for k, c in by_key.items() if k in used},
            redactor=redactor if self.has_judge_steps else None,
        )

    def _client_for(self, model: JudgeModel) -> JudgeClient:
        if self.clients is None:
            return default_judge_client(model)
        client = self.clients.get(model.cache_key())
        if client is None:  # bind() checked every step: only a step added after bind() gets here
            raise ScorerDefinitionError(f"scorer {self.id!r}: judge model {model.model!r} is not bound")
        return client

    # -- identity ------------------------------------------------------------------------------------
    def _fingerprint(self) -> str:
        """Stable across processes: id, version, judges and step shapes (not function addresses)."""
        steps = []
        for name, step in self.steps:
            if isinstance(step, PromptStep):
                judge = self.judge.merged(step.judge) if self.judge else step.judge
                steps.append([name, "prompt", step.description, judge.model.model if judge else None])
            else:
                steps.append([name, "function", step.description])
        payload = {"id": self.id, "version": self.version, "steps": steps}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def has_judge_steps(self) -> bool:
        return any(isinstance(step, PromptStep) for _, step in self.steps)

    # -- run -----------------------------------------------------------------------------------------
    async def run(
        self,
        *,
        input: Any = None,
        output: Any,
        run_id: str | None = None,
        request_context: Mapping[str, Any] | None = None,
        ground_truth: Any = None,
        span_attributes: Mapping[str, Any] | None = None,
        resource_attributes: Mapping[str, Any] | None = None,
    ) -> ScorerRunResult:
        """Score one run. ``span_attributes`` / ``resource_attributes``: what the scored span and its resource
        carry, for scorers that read them (beyond Mastra's run: a judge written in YAML names them)."""
        if not self._has_score_step:
            raise ScorerDefinitionError(f"scorer {self.id!r} has no generate_score step")
        run = self._run_of(input, output, run_id, request_context, ground_truth, span_attributes, resource_attributes)
        fields: dict[str, Any] = {}
        if self.redactor is not None:  # before any step: the judge, the record and the reasons see placeholders
            redacted = self._redacted(run)
            run, fields["redactions"] = redacted.run, dict(redacted.counts)
        judge_results: ScorerJudgeResults | None = None
        completed: list[StepName] = []
        results = StepResults()
        score: float | None = None

        for name, step in self.steps:
            ctx = StepContext(run, results, score)
            try:
                if isinstance(step, PromptStep):
                    value, judge_results = await self._run_prompt_step(name, step, ctx, fields, judge_results)
                else:
                    value = await _resolve(step.fn(ctx))
                if isinstance(value, NotScorable):
                    return self._result(
                        run,
                        fields,
                        judge_results,
                        not_scorable=NotScorableInfo(step=name, reason=value.reason),
                    )
                if name == "preprocess":
                    results = StepResults(value, results.analyze_step_result)
                    fields["preprocess_step_result"] = value
                elif name == "analyze":
                    results = StepResults(results.preprocess_step_result, value)
                    fields["analyze_step_result"] = value
                elif name == "generate_score":
                    if isinstance(value, LabelledScore):
                        fields["label"] = _as_label(value.label)
                        value = value.score
                    score = _as_score(value)
                    fields["score"] = score
                else:
                    fields["reason"] = _as_reason(value)
            except Exception as cause:
                failure = self._failure(name, completed, run, fields, judge_results, cause)
                raise failure from failure.__cause__
            completed.append(name)
        return self._result(run, fields, judge_results)

    def _run_of(
        self,
        input: Any,
        output: Any,
        run_id: str | None,
        request_context: Mapping[str, Any] | None,
        ground_truth: Any,
        span_attributes: Mapping[str, Any] | None,
        resource_attributes: Mapping[str, Any] | None,
    ) -> ScorerRun:
        if output is None:
            raise ScorerInputError(f"scorer {self.id!r}: run() needs output=... (the response to score), got None")
        if run_id is not None and not isinstance(run_id, str):
            raise ScorerInputError(f"scorer {self.id!r}: run_id must be a string, got {type(run_id).__name__}")
        if request_context is not None and not isinstance(request_context, Mapping):
            raise ScorerInputError(
                f"scorer {self.id!r}: request_context must be a mapping, got {type(request_context).__name__}"
            )
        return ScorerRun(
            input,
            output,
            run_id or str(uuid.uuid4()),
            ground_truth,
            request_context,
            span_attributes,
            resource_attributes,
        )

    async def first_prompt(
        self,
        *,
        input: Any = None,
        output: Any,
        request_context: Mapping[str, Any] | None = None,
        ground_truth: Any = None,
        span_attributes: Mapping[str, Any] | None = None,
        resource_attributes: Mapping[str, Any] | None = None,
    ) -> PromptPreview | None:
        """The first prompt this scorer would send a judge for this run, calling no judge: the function steps
        before it run (they are code). ``None`` when the scorer has no prompt step; a step whose later prompts
        depend on the judge's earlier answers cannot be shown without calling it."""
        run = self._run_of(input, output, None, request_context, ground_truth, span_attributes, resource_attributes)
        if self.redactor is not None:  # what would be sent is what is shown
            run = self._redacted(run).run
        results = StepResults()
        for name, step in self.steps:
            ctx = StepContext(run, results)
            if isinstance(step, PromptStep):
                prompt = await _resolve(step.create_prompt(ctx))
                judge = self.judge.merged(step.judge) if self.judge is not None else step.judge
                instructions = judge.instructions if judge is not None else None
                if isinstance(prompt, NotScorable):
                    return PromptPreview(name, instructions, None, prompt.reason)
                return PromptPreview(name, instructions, str(prompt), None)
            value = await _resolve(step.fn(ctx))
            if isinstance(value, NotScorable):
                return PromptPreview(name, None, None, value.reason)
            if name == "preprocess":
                results = StepResults(value, results.analyze_step_result)
            elif name == "analyze":
                results = StepResults(results.preprocess_step_result, value)
            else:  # the score comes before any prompt: a code scorer up to its reason
                return None
        return None

    def _redacted(self, run: ScorerRun) -> RedactedRun:
        """The run as its judges may read it; a redactor that fails fails the run before any step (nothing is sent
        unredacted), with an error that names the failure, never the run's content."""
        assert self.redactor is not None
        try:
            return self.redactor.redact(run)
        except Exception as exc:
            first: StepName = self.steps[0][0] if self.steps else "generate_score"
            cause = RedactionError(f"redaction failed ({type(exc).__name__}); the run was not sent to the judge")
            raise ScorerRunError(failed_step=first, completed_steps=(), result=None, cause=cause) from None

    async def _run_prompt_step(
        self,
        name: StepName,
        step: PromptStep[Any],
        ctx: StepContext,
        fields: dict[str, Any],
        judge_results: ScorerJudgeResults | None,
    ) -> tuple[Any, ScorerJudgeResults | None]:
        started = time.perf_counter()
        prompt = await _resolve(step.create_prompt(ctx))  # raising here records no judge execution
        if isinstance(prompt, NotScorable):  # nothing to judge: no call, the run ends not scorable
            return prompt, judge_results
        if not isinstance(prompt, str):
            raise TypeError(f"{name}: create_prompt must return a string, got {type(prompt).__name__}")
        judge = self.judge.merged(step.judge) if self.judge is not None else step.judge
        if judge is None:
            raise ScorerDefinitionError(f"{name}: a prompt step needs a judge (on the scorer or the step)")
        outcome = await execute_prompt_step(
            client=self._client_for(judge.model),
            judge=judge,
            step=name,
            prompt=prompt,
            output_schema=step.schema_for(ctx),
            started=started,
            scorer_id=self.id,
        )
        judge_results = (judge_results or _NO_JUDGE_RESULTS).with_execution(name, outcome.execution)
        if outcome.error is not None:
            # Carry the judge record out with the failure: the snapshot needs the failed execution.
            raise _FailureWithJudge(outcome.error, judge_results)
        fields[_PROMPT_FIELD[name]] = prompt
        value = outcome.value
        if name == "generate_score":
            assert isinstance(value, GeneratedScore)
            value = value.score
        return value, judge_results

    def _result(
        self,
        run: ScorerRun,
        fields: dict[str, Any],
        judge_results: ScorerJudgeResults | None,
        *,
        not_scorable: NotScorableInfo | None = None,
    ) -> ScorerRunResult:
        return ScorerRunResult(
            run_id=run.run_id,
            input=run.input,
            output=run.output,
            ground_truth=run.ground_truth,
            request_context=dict(run.request_context) if run.request_context is not None else None,
            judge=judge_results,
            not_scorable=not_scorable,
            **fields,
        )

    def _failure(
        self,
        name: StepName,
        completed: list[StepName],
        run: ScorerRun,
        fields: dict[str, Any],
        judge_results: ScorerJudgeResults | None,
        cause: BaseException,
    ) -> ScorerRunError:
        if isinstance(cause, _FailureWithJudge):
            judge_results, cause = cause.judge_results, cause.cause
        snapshot: ScorerRunResult | None = None
        if fields.keys() - {"redactions"} or judge_results is not None:
            # Only what completed, plus run identity and input (Mastra's snapshot rule); the redaction counts
            # ride along once something completed.
            snapshot = ScorerRunResult(run_id=run.run_id, input=run.input, judge=judge_results, **fields)
        return ScorerRunError(failed_step=name, completed_steps=tuple(completed), result=snapshot, cause=cause)


@dataclass(frozen=True, slots=True)
class PromptPreview:
    """What ``Scorer.first_prompt`` shows: the step, the judge's system instructions and the prompt, or why
    the run is not scorable before any judge call."""

    step: StepName
    instructions: str | None
    prompt: str | None
    not_scorable: str | None = None


class _FailureWithJudge(Exception):
    def __init__(self, cause: BaseException, judge_results: ScorerJudgeResults) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.judge_results = judge_results


def _as_score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"generate_score must return a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"generate_score must return a finite number, got {value}")
    return float(value)


def _as_label(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"a score's label must be a non-empty string, got {value!r}")
    return value


def _as_reason(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"generate_reason must return a string, got {type(value).__name__}")


def create_scorer(
    *,
    id: str,
    name: str | None = None,
    description: str = "",
    judge: JudgeLike | None = None,
) -> Scorer:
    """Start a scorer; add steps with ``.preprocess() .analyze() .generate_score() .generate_reason()``."""
    if not isinstance(id, str) or not id.strip():
        raise ScorerDefinitionError("create_scorer needs a non-empty id")
    return Scorer(id=id, name=name or id, description=description, judge=_coerce_judge(judge))
