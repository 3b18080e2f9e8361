import sys

from hitl_mcp.cli import main

sys.exit(main())
