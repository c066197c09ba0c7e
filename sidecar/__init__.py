"""scoring-sidecar: score live agent traces (OTLP from Kafka) with Mastra-style scorers.

The package is laid out along the data flow, each layer importing only those below it: ``scoring`` (scorer
core and judge), ``core`` (the score contract), ``scorers`` (prebuilt scorers), ``conventions`` (spans →
scorer runs), ``ingest`` (Kafka records → spans), ``runtime`` (the engine), ``app`` (the composition root),
the commands and ``cli``; ``exporters`` is a sibling package. docs/architecture.md has the layers, which
``lint-imports`` checks. This module holds only the version: ``exporters`` imports it.
"""

__version__ = "0.1.0"
