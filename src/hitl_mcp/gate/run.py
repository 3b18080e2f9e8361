"""Running ``hitl-mcp proxy``: a stdio MCP server to its host, with the embedded hitl-mcp runtime.

The proxy embeds a broker on the configured state directory, exactly as ``hitl-mcp serve`` over
stdio does (``serving._serve``): the same durable rows, channels, outbox and expiry, and the inbox
served beside it when its port is free. When a ``hitl-mcp serve`` already holds the port, the two
share the database, and the person answers in that server's inbox. Talking to a running server
instead would make the proxy depend on one being up, and the approval's payload hash would be
checked by someone else's code; embedding keeps the check at the forward, in this process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer

from hitl_mcp.config import Config, resolve_http_port
from hitl_mcp.gate.policy import Policy, load_policy
from hitl_mcp.gate.proxy import ProxyServer
from hitl_mcp.gate.upstream import Upstream
from hitl_mcp.runtime import DB_FILE, ConfigRefused, Runtime, check_database, prepare_state_dir


class ProxyRuntime(Runtime):
    def __init__(self, config: Config, state_dir: Path, upstream: Upstream, policy: Policy) -> None:
        super().__init__(config, state_dir)
        self.upstream = upstream
        self.policy = policy

    def build_mcp(self) -> MCPServer:
        return ProxyServer(self.upstream, self.policy, self.broker, self.settings(), "hitl-mcp-proxy")


def cmd_proxy(args: argparse.Namespace) -> int:
    from hitl_mcp.cli import _loop_options, setup_logging
    from hitl_mcp.cli_requests import CliError
    from hitl_mcp.config import load_config, resolve_state_dir

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == bool(args.upstream):
        raise CliError("name one upstream: --upstream URL, or -- followed by the command to run")
    if args.call_timeout <= 0:
        raise CliError("--call-timeout must be more than 0 seconds")
    policy = load_policy(args.config)
    config = load_config(args.server_config)
    state_dir = resolve_state_dir(config, args.state_dir)
    setup_logging(config.server.log_level)
    upstream = Upstream(command=command or None, url=args.upstream, timeout=args.call_timeout)
    unknown = _unknown_channels(policy, config)
    if unknown:
        raise CliError(
            f"{args.config}: unknown channel {unknown}; configured channels: {', '.join(config.channels)}"
        )
    try:
        anyio.run(_serve, config, state_dir, upstream, policy, backend_options=_loop_options())
    except ConfigRefused as exc:
        print(f"hitl-mcp: {exc}", file=sys.stderr)
        return 2
    return 0


def _unknown_channels(policy: Policy, config: Config) -> str | None:
    named = [*(policy.channels or [])]
    for rule in policy.rules:
        named += rule.channels or []
    unknown = [name for name in named if name not in config.channels]
    return repr(unknown[0]) if unknown else None


async def _serve(config: Config, state_dir: Path, upstream: Upstream, policy: Policy) -> None:
    from hitl_mcp.net import browser_url, http_url
    from hitl_mcp.serving import _serve as serve_stdio
    from hitl_mcp.serving import bind

    prepare_state_dir(state_dir)
    check_database(state_dir / DB_FILE)
    runtime = ProxyRuntime(config, state_dir, upstream, policy)
    host = config.server.http.host
    port = resolve_http_port(config)
    url = http_url(host, port)
    if host not in ("0.0.0.0", "::"):
        runtime.inbox_url = runtime.inbox_url or url
    runtime.local_url = runtime.inbox_url or browser_url(host, port)
    mcp = runtime.build_mcp()
    sock = bind(host, port)  # None: a `hitl-mcp serve` has the port; we share its database
    async with anyio.create_task_group() as tg:
        await tg.start(upstream.run)
        try:
            await serve_stdio(runtime, mcp, "stdio", host, sock, url, state_dir)
        finally:
            await upstream.close()
            tg.cancel_scope.cancel()
