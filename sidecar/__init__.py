"""scoring-sidecar: score live agent traces (OTLP from Kafka) with Mastra-style scorers.

The package is laid out along the data flow: ``ingest`` (Kafka records → OTLP spans),
``conventions`` (spans → scorer runs), ``scoring`` (scorer core and judge), ``scorers``
(prebuilt scorers), ``runtime`` (dispatch, offsets, settings); ``exporters`` is a sibling package.
"""

__version__ = "0.1.0"
