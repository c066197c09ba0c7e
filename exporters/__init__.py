"""Exporters: where scores, judge usage and spans go (Prometheus, OTLP, Kafka score records)."""
