"""Context and grounding: faithfulness, hallucination, context precision, recall and relevance, noise sensitivity
(docs/scorers-context.md)."""
