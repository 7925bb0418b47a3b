"""Synthesis: tool graph, topology-aware sampling, executed trajectories, exports."""
