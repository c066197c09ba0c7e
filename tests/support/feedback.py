"""Human feedback in the tests: the topics an operator creates (docs/feedback.md), feedback records produced as a
labelling tool would (keyed by trace id, Kafka's default partitioner), judges written in YAML whose verdicts the
scripted judge gives, and what the tests read back (metrics, the pairs topic)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from sidecar.testing.judge_server import Reply
from tests.support.sessions import create_session_topic

__all__ = [
    "RATING",
    "VERDICT",
    "FeedbackTopics",
    "create_feedback_topics",
    "feedback_judge",
    "metric",
    "send_feedback",
]

# Two judges written in YAML: a boolean verdict and a rating of 0 to 10 (a score on 0–1).
VERDICT: dict[str, Any] = {
    "id": "verdict",
    "kind": "llm-judge",
    "judge": "default",
    "options": {
        "instructions": "VERDICT: decide whether the answer helps the user.",
        "prompt": "The user asked: {{ input }}\nThe agent answered: {{ output }}",
        "output": {"type": "boolean"},
    },
}
RATING: dict[str, Any] = {
    "id": "rating",
    "kind": "llm-judge",
    "judge": "default",
    "options": {
        "instructions": "RATING: rate how helpful the answer is.",
        "prompt": "The user asked: {{ input }}\nThe agent answered: {{ output }}",
        "output": {"type": "number", "min": 0, "max": 10},
    },
}


def feedback_judge(body: dict[str, Any]) -> Reply:
    """The verdict and rating of a prompt, from a digest of it: fixed per run, spread over the range."""
    messages = body["messages"]
    system = next(m["content"] for m in messages if m["role"] == "system")
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    digest = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    if system.startswith("VERDICT"):
        return Reply.json({"reason": "checked the answer", "passed": digest % 3 != 0})
    return Reply.json({"reason": "rated the answer", "score": digest % 11})


@dataclass(frozen=True)
class FeedbackTopics:
    feedback: str
    state: str
    pairs: str

    def config(self, **overrides: Any) -> dict[str, Any]:
        return {"topic": self.feedback, "state_topic": self.state, "pairs_topic": self.pairs, **overrides}


async def create_feedback_topics(
    bootstrap: str, unique_name: Callable[[str], str], new_topic: Callable[..., Any], *, partitions: int
) -> FeedbackTopics:
    """The feedback topic (as many partitions as the score topic), the compacted state topic, the pairs' topic."""
    feedback = await new_topic("feedback", partitions=partitions)
    state = unique_name("feedback-state")
    await create_session_topic(bootstrap, state, partitions, {"cleanup.policy": "compact"})
    pairs = await new_topic("pairs", partitions=1)
    return FeedbackTopics(feedback, state, pairs)


async def send_feedback(bootstrap: str, topic: str, items: Iterable[Mapping[str, Any] | bytes]) -> None:
    """Each item as a labelling tool sends it: JSON, keyed by its conversation id or else its trace id."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futures = []
        for item in items:
            if isinstance(item, bytes):
                futures.append(await producer.send(topic, item, key=b"garbage"))
                continue
            key = str(item.get("conversationId") or item["traceId"]).encode()
            futures.append(await producer.send(topic, json.dumps(item).encode(), key=key))
        for future in futures:
            await future
    finally:
        await producer.stop()


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels`` (the sum when several match), or None."""
    found: list[float] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                found.append(sample.value)
    return sum(found) if found else None
