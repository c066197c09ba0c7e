"""Judges written in YAML: kind llm-judge, its template, variables and output types (docs/custom-judges.md)."""
