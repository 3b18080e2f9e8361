"""Every verb of the ``hitl-mcp`` command (``main.py`` builds the parser and runs a verb; one module
per group of verbs). ``hitl_mcp.cli:main`` is the entry point."""

from hitl_mcp.cli.main import main

__all__ = ["main"]
