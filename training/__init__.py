"""The trainer program, run in its own process: TRL SFT entry point, stage configs, chat template, GGUF conversion."""
