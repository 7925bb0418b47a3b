"""The `envreg` command line."""
