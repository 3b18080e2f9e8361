"""The gate: the approval proxy (``hitl-mcp proxy``) and the host hook formats (``hitl-mcp hook``)."""
