"""ggtrain: a JAX trainer for LLM agents in multi-turn environments with graph-based credit assignment."""

__version__ = "0.1.0"
