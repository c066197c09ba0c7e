"""Conversations (scope: session): completeness, knowledge retention, role adherence, user frustration, and the
transcript they read (docs/scorers-conversation.md)."""
