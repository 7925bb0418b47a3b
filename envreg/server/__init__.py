"""The environment server: MCP agent plane and token-protected control plane in one process."""
