"""Test tools that ship with the package: a scripted OpenAI-compatible judge server."""
