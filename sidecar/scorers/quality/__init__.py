"""Output quality: relevancy, similarity, bias, toxicity, prompt alignment, rubric, summarization (docs/scorers-
quality.md)."""
