"""Code scorers over text: completeness, content similarity, keyword coverage, textual difference, tone
(docs/scorers-code.md)."""
