"""The MCP face: the tools (``server``), their arguments and schemas (``tool_args``,
``tool_schemas``), what a call's context says (``call_context``), the host's window and forms
(``host_window``, ``host_forms``), each host's budget (``hosts``, ``settings``) and MCP tasks
(``tasks/``). It never imports the web face."""
