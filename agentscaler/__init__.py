"""agentscaler: executable, verifiable tool-use environments at scale (AgentScaler method)."""

__version__ = "0.1.0"
