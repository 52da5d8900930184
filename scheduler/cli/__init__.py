"""The `tessera` command line."""
