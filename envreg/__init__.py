"""envreg: a registry and sandbox runtime for executable, stateful tool-use environments."""

__version__ = "0.1.0"
