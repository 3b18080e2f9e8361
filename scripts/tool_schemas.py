"""Write src/hitl_mcp/mcp/tool_schemas.json from the tools as they are (after changing a tool):
python scripts/tool_schemas.py"""

from __future__ import annotations

import json

from hitl_mcp.mcp.server import computed
from hitl_mcp.mcp.tool_schemas import FILE

if __name__ == "__main__":
    FILE.write_text(json.dumps(computed(), indent=1) + "\n", encoding="utf-8")
