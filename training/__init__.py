"""Two-stage SFT: dataset export, TRL trainer entry point, configs."""
