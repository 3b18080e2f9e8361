"""The Claude Desktop bundle's entry point (server/main.py in the .mcpb): ``hitl-mcp serve`` over stdio.

Claude Desktop runs it with ``uv run`` in the unpacked bundle, where uv installs the project from
its pyproject.toml. The settings of the bundle arrive as environment variables (manifest.json's
``mcp_config.env``); an optional setting left empty arrives as an empty string, which hitl-mcp reads
as not set. ``HITL_BUNDLE_CONFIG`` is read here alone: the config file, when one is chosen.
"""

import os
import sys

from hitl_mcp.cli import main

config = os.environ.get("HITL_BUNDLE_CONFIG", "").strip()
sys.exit(main(["serve", *(["--config", config] if config else []), *sys.argv[1:]]))
