"""Conversations (``scope: session``, docs/sessions.md): the turns of a conversation scored together once it goes
quiet.

- ``turns``: stage 1, a ready trace's turns published to the internal topic (a checkpointed part), and the runs a
  closed window makes;
- ``stage``: stage 2, the topic's turns held by conversation in ``windows`` until a window closes, its runs
  started on the shared dispatcher, its marker and tombstones written once its scores are confirmed;
- ``topic``: the topic's records and keys, what publishes to it, the check at start-up;
- ``limits``: the bounds and their defaults.
"""

from sidecar.runtime.sessions.limits import SessionLimits, TurnCaps
from sidecar.runtime.sessions.stage import Stage2
from sidecar.runtime.sessions.topic import TurnTopic, check_topic
from sidecar.runtime.sessions.turns import ConversationRuns, TurnPublishing, Turns, conversation_runs

__all__ = [
    "ConversationRuns",
    "SessionLimits",
    "Stage2",
    "TurnCaps",
    "TurnPublishing",
    "TurnTopic",
    "Turns",
    "check_topic",
    "conversation_runs",
]
