"""HAProxy in front of replicas, run from the very file we ship: ``haproxy -db -f deploy/haproxy.cfg``,
with the environment it documents (``HITL_LB_PORT``, ``HITL_REPLICA_A``, ``HITL_REPLICA_B``).

``async with balancer({"a": "127.0.0.1:8001", "b": "127.0.0.1:8002"}) as lb`` yields once HAProxy
answers and sees every replica up (``lb.url``; ``lb.up()`` reads its server states from the stats
socket), and stops it at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.conftest import free_port
from tests.support.events import Changes

ROOT = Path(__file__).resolve().parent.parent.parent
CONFIG = ROOT / "deploy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def haproxy_or_skip() -> str:
    if not os.access(HAPROXY, os.X_OK):
        pytest.skip("HAProxy is not installed (apt-get install haproxy; .ci/run installs it)")
    return HAPROXY


@dataclass
class Balancer:
    url: str
    stats: Path
    lines: list[str] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)
    exited: int | None = None

    def up(self) -> dict[str, bool]:
        """Each replica's state as HAProxy's health checks see it (``show stat`` on the stats socket)."""
        raw = b""
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(self.stats))
                s.sendall(b"show stat\n")
                while chunk := s.recv(65536):
                    raw += chunk
        except OSError:  # not listening yet, or gone
            if self.exited is not None:
                raise AssertionError(f"haproxy exited ({self.exited}): {self.lines}") from None
        states: dict[str, bool] = {}
        for row in raw.decode().splitlines():
            cells = row.split(",")
            if len(cells) > 17 and cells[0] == "replicas" and cells[1] not in ("BACKEND", "FRONTEND"):
                states[cells[1]] = cells[17].startswith("UP")
        return states

    async def until(self, check: Callable[[dict[str, bool]], bool], seconds: float = 10) -> None:
        """Until ``check(self.up())`` holds: HAProxy's health checks fire no event a test could
        await, so its state is read again every 0.1 s, as any client of its stats socket does."""
        with anyio.fail_after(seconds):
            while True:
                if check(self.up()):
                    return
                await anyio.sleep(0.1)


@contextlib.asynccontextmanager
async def balancer(replicas: Mapping[str, str], port: int | None = None) -> AsyncIterator[Balancer]:
    """HAProxy with ``deploy/haproxy.cfg`` in front of ``replicas`` (server name -> host:port)."""
    binary = haproxy_or_skip()
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="hitl-lb-") as tmp:
        stats = Path(tmp) / "stats.sock"
        # the stats socket is the test's window on the health checks: an extra file, the shipped one unchanged
        extra = Path(tmp) / "stats.cfg"
        extra.write_text(f"global\n    stats socket {stats} mode 600 level admin\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_")}
        env["HITL_LB_PORT"] = str(port)
        for name, address in replicas.items():
            env[f"HITL_REPLICA_{name.upper()}"] = address
        lb = Balancer(f"http://127.0.0.1:{port}", stats)
        async with await anyio.open_process(
            [binary, "-db", "-f", str(CONFIG), "-f", str(extra)], env=env, stdout=-1, stderr=-1
        ) as process:

            async def drain(stream: anyio.abc.ByteReceiveStream | None) -> None:
                assert stream is not None
                async for chunk in stream:
                    lb.lines += chunk.decode(errors="replace").splitlines()
                    lb.changes.fire()
                lb.exited = await process.wait()
                lb.changes.fire()

            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, process.stdout)
                tg.start_soon(drain, process.stderr)
                try:
                    await _all_up(lb, len(replicas))
                    yield lb
                finally:
                    if process.returncode is None:
                        process.terminate()
                    with anyio.move_on_after(5):
                        await process.wait()
                    if process.returncode is None:
                        process.kill()
                    tg.cancel_scope.cancel()


async def _all_up(lb: Balancer, count: int) -> None:
    """Until HAProxy's checks see ``count`` replicas up, and it answers on its port."""
    await lb.until(lambda states: len(states) == count and all(states.values()), seconds=15)
    async with httpx2.AsyncClient() as http:
        assert (await http.get(f"{lb.url}/healthz")).status_code == 200
