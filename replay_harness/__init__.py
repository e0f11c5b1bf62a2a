"""Replay harness: torch oracles and tools for replaying LLM sampler steps."""
