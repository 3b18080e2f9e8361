"""A real Prefect server (``prefect server start``, on its SQLite default under a ``PREFECT_HOME`` of
its own) for the Prefect tests, and the environment its flows run in. Starting it takes about 20 s on
this machine, so a test module shares one (``prefect_api`` in ``tests/client/test_prefect.py``).

Prefect's API has no push for a client, so waiting for a flow run's state reads it again every 200 ms."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2

from tests.conftest import free_port
from tests.support.events import Changes, until

PREFECT = str(Path(sys.executable).parent / "prefect")


def prefect_env(home: Path, api_url: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment for Prefect: its home, no analytics, no UI, runners that look for
    work every second; ``PREFECT_API_URL`` when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HITL_"))}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_UI_ENABLED="false",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        PYTHONUNBUFFERED="1",
    )
    if api_url:
        env["PREFECT_API_URL"] = api_url
    env.update(extra)
    return env


@contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    """``prefect server start`` on a free port; yields its API URL (``http://127.0.0.1:<port>/api``)
    once ``/health`` answers."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(home / "server.log", "w")
    process = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=prefect_env(home),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=home,
    )
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise AssertionError(f"prefect server exited: {(home / 'server.log').read_text()[-2000:]}")
            try:
                if httpx2.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("prefect server did not answer /health within 120 s")
            time.sleep(0.2)  # a process starting up: nothing to await but its port
        yield api
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


async def polled(check: Callable[[], Any], seconds: float = 60) -> Any:
    """``check()`` (async) once it is truthy, tried again every 200 ms (Prefect's API has no push)."""
    changes = Changes()

    async def tick() -> None:
        while True:
            await anyio.sleep(0.2)
            changes.fire()

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        found = await until(check, changes, seconds=seconds)
        tg.cancel_scope.cancel()
    return found


class PrefectApi:
    """The few calls of Prefect's REST API the tests make."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def _call(self, method: str, path: str, json: Any = None) -> Any:
        """One call; a 503 (Prefect's server, its SQLite database busy on a loaded machine) is tried
        again after a pause, as Prefect's own client does (``PREFECT_CLIENT_MAX_RETRIES``)."""
        async with httpx2.AsyncClient(base_url=self.url, timeout=10) as http:
            for pause in (0.5, 1, 2, 4, 0):
                response = await http.request(method, path, json=json)
                if response.status_code != 503 or not pause:
                    break
                await anyio.sleep(pause)  # a backoff before a retry, not a wait for an event
        assert response.status_code < 300, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()

    async def flow_run(self, flow_run_id: str) -> dict[str, Any]:
        return dict(await self._call("GET", f"/flow_runs/{flow_run_id}"))

    async def flow_runs(self, flow: str) -> list[dict[str, Any]]:
        """The runs of the flow named ``flow``, oldest first."""
        body = {"flows": {"name": {"any_": [flow]}}, "sort": "EXPECTED_START_TIME_ASC"}
        return list(await self._call("POST", "/flow_runs/filter", body))

    async def states(self, flow_run_id: str) -> list[dict[str, Any]]:
        """The flow run's states, oldest first."""
        found = await self._call("GET", f"/flow_run_states/?flow_run_id={flow_run_id}")
        return sorted(found, key=lambda s: s["timestamp"])

    async def task_runs(self, flow_run_id: str) -> list[dict[str, Any]]:
        body = {"flow_runs": {"id": {"any_": [flow_run_id]}}}
        return list(await self._call("POST", "/task_runs/filter", body))

    async def inputs(self, flow_run_id: str, prefix: str) -> dict[str, str]:
        """The flow run's inputs whose keys start with ``prefix``: key -> value (JSON text)."""
        body = {"prefix": prefix, "limit": 50}
        found = await self._call("POST", f"/flow_runs/{flow_run_id}/input/filter", body)
        return {entry["key"]: entry["value"] for entry in found}

    async def logs(self, flow_run_id: str) -> list[str]:
        body = {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "sort": "TIMESTAMP_ASC"}
        return [entry["message"] for entry in await self._call("POST", "/logs/filter", body)]

    async def deployment(self, name: str) -> dict[str, Any] | None:
        async with httpx2.AsyncClient(base_url=self.url, timeout=10) as http:
            response = await http.get(f"/deployments/name/{name}")
        return dict(response.json()) if response.status_code == 200 else None

    async def run_deployment(self, deployment_id: str, parameters: dict[str, Any]) -> str:
        made = await self._call(
            "POST", f"/deployments/{deployment_id}/create_flow_run", {"parameters": parameters}
        )
        return str(made["id"])
