"""agentscaler: executable, verifiable tool-use environments at scale (AgentScaler method)."""

from agentscaler import pyast

__version__ = "0.1.0"

pyast.install()  # every process of ours parses Python one thread at a time (CPython 3.11's ast is not thread-safe)
