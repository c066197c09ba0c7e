"""Tool use: tool-call accuracy (code and judge), trajectory (code and judge), quick checks (docs/scorers-
tools.md)."""
