"""Running ``hitl-mcp proxy``: a stdio MCP server to its host, with the embedded hitl-mcp runtime.

The proxy embeds a broker on the configured state directory, exactly as ``hitl-mcp serve`` over
stdio does (``serving._serve``): the same durable rows, channels, outbox and expiry, and the inbox
served beside it when its port is free. When a ``hitl-mcp serve`` already holds the port, the two
share the database, and the person answers in that server's inbox. Talking to a running server
instead would make the proxy depend on one being up, and the approval's payload hash would be
checked by someone else's code; embedding keeps the check at the forward, in this process.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer

from hitl_mcp.config import Config, resolve_http_port
from hitl_mcp.gate.policy import Policy
from hitl_mcp.gate.proxy import ProxyServer
from hitl_mcp.gate.upstream import Upstream
from hitl_mcp.runtime import Runtime, check_database, prepare_state_dir
from hitl_mcp.store.select import DB_FILE


class ProxyRuntime(Runtime):
    def __init__(self, config: Config, state_dir: Path, upstream: Upstream, policy: Policy) -> None:
        super().__init__(config, state_dir)
        self.upstream = upstream
        self.policy = policy

    def build_mcp(self) -> MCPServer:
        inbox = self.inbox_url or self.local_url
        return ProxyServer(self.upstream, self.policy, self.broker, self.settings(), "hitl-mcp-proxy", inbox)


async def serve_proxy(
    config: Config, state_dir: Path, upstream: Upstream, policy: Policy, port: int | None = None
) -> None:
    """The proxy over stdio, with the upstream running beside it until the host goes away."""
    from hitl_mcp.kit.net import browser_url, http_url
    from hitl_mcp.serving import bind, serve_runtime

    prepare_state_dir(state_dir)
    check_database(state_dir / DB_FILE)
    runtime = ProxyRuntime(config, state_dir, upstream, policy)
    host = config.server.http.host
    port = resolve_http_port(config, port)
    url = http_url(host, port)
    if host not in ("0.0.0.0", "::"):
        runtime.inbox_url = runtime.inbox_url or url
    runtime.local_url = runtime.inbox_url or browser_url(host, port)
    mcp = runtime.build_mcp()
    assert isinstance(mcp, ProxyServer)
    sock = bind(host, port)  # None: a `hitl-mcp serve` has the port; we share its database
    async with anyio.create_task_group() as tg:
        await tg.start(upstream.run)
        await tg.start(mcp.forwards.run)
        try:
            await serve_runtime(runtime, mcp, "stdio", host, sock, url, state_dir)
        finally:
            await upstream.close()
            tg.cancel_scope.cancel()
