"""Things the sidecar can run in-process for demos and tests (an embedded Kafka-compatible broker)."""

from sidecar.embedded.broker import BrokerStartError, EmbeddedBroker, create_topics, resolve_tansu_binary

__all__ = ["BrokerStartError", "EmbeddedBroker", "create_topics", "resolve_tansu_binary"]
