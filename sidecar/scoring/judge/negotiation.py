"""Which structured-output shape a judge's server accepts, learnt from its answers (``structured_output: auto``).

Servers that speak OpenAI's chat API do not all take the same ``response_format`` (docs/structured-output.md):
OpenAI, Azure, vLLM, Ollama and LM Studio take ``json_schema``; llama.cpp's servers answer it HTTP 500 (a
request validation error wrapped as an internal error) and take ``json_object`` with a ``schema``; TGI takes
``json_object`` with the schema as ``value``. So a judge in ``auto`` mode tries the shapes richest first:

1. ``json_schema``: the step's prompt, the schema as OpenAI's structured outputs;
2. ``json_object``: the schema in the prompt, and ``{"type": "json_object", "schema": S, "value": S}`` (the
   key llama.cpp reads and the key TGI reads);
3. ``prompt``: the schema in the prompt only, the answer's JSON found and repaired when the model wraps it
   in prose (``sidecar.scoring.judge.structured``).

A shape is *tried* tentatively (``ChatRequest.shape_probe``): an answer of HTTP 400, 415, 422, 500 or 501 to
it ends the call at once, without the client's retries, and the judge's gate does not count it against the
judge's health (no circuit breaker, no held runs: a refused shape is not an outage); the step goes on with the
next shape at once. The last shape is sent as any call is (retries, breaker), so a server that fails every
request still reads as an outage.

The negotiation settles, once per judge (one INFO line, and ``on_settled`` for the metric): on the first shape
the server answers while it is the richest not given up; a shape is given up once the server refused it
:data:`STRIKES` times in steps where a lesser shape was then answered (one refusal could be a passing fault
that happened to hit the richer request). An explicit mode (``json_schema``, ``json_object``, ``prompt``)
is settled from the start and never tried tentatively.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final, Literal, get_args

from sidecar.scoring.judge.errors import ContextWindowExceededError, ProviderError

__all__ = [
    "SHAPES",
    "STRIKES",
    "Shape",
    "ShapeNegotiation",
    "StructuredOutputMode",
    "refuses_shape",
]

log = logging.getLogger(__name__)

Shape = Literal["json_schema", "json_object", "prompt"]
StructuredOutputMode = Literal["auto", "json_schema", "json_object", "prompt"]
SHAPES: Final[tuple[Shape, ...]] = get_args(Shape)
# Refusals of a shape, each followed by an answer to a lesser one, before the shape is given up.
STRIKES: Final = 2
# What a server answers a response_format it does not take: vLLM 400, TGI 422, llama.cpp 500 (its request
# validation error wrapped as an internal error), a server without the feature 501; 415 for a body it cannot read.
_SHAPE_REFUSALS: Final = frozenset({400, 415, 422, 500, 501})
_WORDS: Final = 200

Settled = Callable[[str, Shape], None]


def refuses_shape(error: ProviderError) -> bool:
    """Whether ``error`` may be the server refusing the request's shape (not a prompt too long for the model)."""
    return error.status_code in _SHAPE_REFUSALS and not isinstance(error, ContextWindowExceededError)


class ShapeNegotiation:
    """One judge's structured-output shape (see the module doc). ``judge`` names it in the log line and for
    ``on_settled(judge, shape)``, which hears of the shape in use once it is known (at once for an explicit mode)."""

    def __init__(self, mode: StructuredOutputMode, *, judge: str, on_settled: Settled | None = None) -> None:
        self.mode = mode
        self.judge = judge
        self._on_settled = on_settled
        self._settled: Shape | None = None
        self._floor = 0  # the richest shape not given up
        self._strikes: Counter[Shape] = Counter()
        self._refusals: dict[Shape, str] = {}  # the server's last words refusing each shape
        if mode != "auto":
            self._settle(mode)

    @property
    def settled(self) -> Shape | None:
        """The shape every call uses, once known; ``None`` while ``auto`` is still learning."""
        return self._settled

    def shapes(self) -> tuple[Shape, ...]:
        """The shapes a step tries, in order: the settled one, or those not given up, richest first."""
        if self._settled is not None:
            return (self._settled,)
        return SHAPES[self._floor :]

    def answered(self, shape: Shape, refused: Sequence[tuple[Shape, ProviderError]] = ()) -> None:
        """The server answered ``shape`` after refusing ``refused`` in the same step."""
        if self._settled is not None:
            return
        for refused_shape, error in refused:
            self._strikes[refused_shape] += 1
            self._refusals[refused_shape] = f"HTTP {error.status_code}: {error.message.strip()[:_WORDS]}"
        while SHAPES[self._floor] != shape and self._strikes[SHAPES[self._floor]] >= STRIKES:
            self._floor += 1
        if SHAPES[self._floor] == shape:
            self._settle(shape)

    def _settle(self, shape: Shape) -> None:
        self._settled = shape
        if self.mode == "auto":
            given_up = SHAPES[: SHAPES.index(shape)]
            if given_up:
                words = "; ".join(f"{s}: {self._refusals.get(s, 'refused')}" for s in given_up)
                log.info(
                    "judge %s: the server refused structured output as %s (%s) and answers %s: calls ask for %s "
                    "from now on (structured_output: %s skips this negotiation)",
                    self.judge,
                    " and ".join(given_up),
                    words,
                    shape,
                    shape,
                    shape,
                )
            else:
                log.info("judge %s: the server takes structured output as %s", self.judge, shape)
        if self._on_settled is not None:
            try:
                self._on_settled(self.judge, shape)
            except Exception:
                log.exception("structured-output callback failed for judge %s", self.judge)
