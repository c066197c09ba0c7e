"""Prebuilt scorers (ports of Mastra's)."""

from sidecar.scorers.prompt_alignment import PromptAlignmentOptions, create_prompt_alignment_scorer_llm

__all__ = ["PromptAlignmentOptions", "create_prompt_alignment_scorer_llm"]
