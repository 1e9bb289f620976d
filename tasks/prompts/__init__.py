"""Prompt templates of the LLM stages (plain string constants: easy to read, diff and test)."""
