"""Two ``hitl-mcp serve --transport http`` replicas on one store, behind HAProxy (``deploy/haproxy.cfg``).

``async with replica_set(tmp_path, state_dir, channels) as rs`` starts replica ``a``, then ``b``, then
the balancer, and yields a :class:`ReplicaSet`: ``rs.a``/``rs.b`` (each a :class:`Replica` with its
direct URL and process, which a test may SIGKILL), ``rs.lb`` (the balancer) and ``rs.agent(...)``, an
MCP client through the balancer that records which replica answered each response (HAProxy's
``X-Hitl-Replica`` header).

The store: on SQLite (``database=None``) the replicas share one SQLite file in one state directory
(several processes on one SQLite file is a supported set-up); on PostgreSQL (``database`` a URL) each
has a state directory of its own and ``$HITL_DATABASE_URL``, as deploy/compose.yaml sets them. Either
way they have the same ``$HITL_REQUEST_STATE_KEY``, web token and ``server.public_url`` (the
balancer's address).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import Implementation

from tests.conftest import TOKEN, ServerProcess, free_port, serve_args, server_env, server_process
from tests.support.haproxy import Balancer, balancer

STATE_KEY = secrets.token_hex(32)
AGENT = "deploy-agent"


@dataclass
class Replica:
    name: str
    port: int
    process: ServerProcess

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return int(self.process.process.pid)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no goodbye, its leases and connections dropped by the kernel."""
        self.process.process.kill()


@dataclass
class ReplicaSet:
    a: Replica
    b: Replica
    lb: Balancer
    state_dir: Path
    """Where the CLI looks (``cli(rs.state_dir, ..., **rs.env)``): the shared one, or replica a's."""
    env: dict[str, str]
    """What the CLI needs besides: ``$HITL_DATABASE_URL`` on PostgreSQL."""
    served: list[str] = field(default_factory=list)
    """The replica that answered each response to ``agent`` clients, in order."""

    def replica(self, name: str) -> Replica:
        return self.a if name == "a" else self.b

    def other(self, name: str) -> Replica:
        return self.b if name == "a" else self.a

    def api(self, base: str) -> httpx2.AsyncClient:
        """The JSON API at ``base`` (a replica's own URL, or the balancer's), with the web token."""
        return httpx2.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

    @contextlib.asynccontextmanager
    async def agent(
        self, mode: str = "legacy", base: str | None = None, **options: Any
    ) -> AsyncIterator[Client]:
        """An MCP client (the same client name every time, so it may re-attach) through the balancer,
        or straight to ``base``; ``options`` go to ``Client`` (an ``elicitation_callback``...)."""

        async def note(response: httpx2.Response) -> None:
            if "x-hitl-replica" in response.headers:
                self.served.append(response.headers["x-hitl-replica"])

        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        http.event_hooks["response"].append(note)
        async with http:
            transport = streamable_http_client(f"{base or self.lb.url}/mcp", http_client=http)
            async with Client(
                transport, mode=mode, client_info=Implementation(name=AGENT, version="1.0"), **options
            ) as client:
                yield client


def config_text(port: int, lb_port: int, channels: str) -> str:
    return f"""
server:
  http: {{host: 127.0.0.1, port: {port}}}
  public_url: http://127.0.0.1:{lb_port}
defaults:
  heartbeat_seconds: 1
channels:
  web: {{type: web}}
{channels}
"""


@contextlib.asynccontextmanager
async def replica_set(
    tmp_path: Path, state_dir: Path, channels: str = "", database: str | None = None
) -> AsyncIterator[ReplicaSet]:
    lb_port = free_port()
    extra = {"HITL_DATABASE_URL": database} if database else {}
    async with contextlib.AsyncExitStack() as stack:
        started: list[Replica] = []
        for name in ("a", "b"):
            own = state_dir / name if database else state_dir
            own.mkdir(exist_ok=True)
            env = server_env(own, HITL_REQUEST_STATE_KEY=STATE_KEY, **extra)
            port = free_port()
            config = tmp_path / f"replica-{name}.yaml"
            config.write_text(config_text(port, lb_port, channels))
            process = await stack.enter_async_context(
                server_process(serve_args(config, "--transport", "http"), env, ready="MCP (streamable HTTP)")
            )
            started.append(Replica(name, port, process))
        a, b = started
        lb = await stack.enter_async_context(
            balancer({"a": f"127.0.0.1:{a.port}", "b": f"127.0.0.1:{b.port}"}, lb_port)
        )
        yield ReplicaSet(a, b, lb, state_dir / "a" if database else state_dir, extra)
