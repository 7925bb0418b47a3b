"""Where envreg keeps its data (kept for the registry modules; `envreg.config` owns it)."""

from envreg.config import envreg_home

__all__ = ["envreg_home"]
