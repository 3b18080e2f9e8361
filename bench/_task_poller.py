"""A polling client for ``bench/wait_cost.py``: a share of the waiting MCP tasks, in its own process.

Started by the bench, never by hand. It speaks the 2026-07-28 protocol as Claude Code does over
streamable HTTP: stateless JSON-RPC POSTs to ``/mcp``, each declaring the
``io.modelcontextprotocol/tasks`` extension in its own ``_meta``, over ``--connections`` keep-alive
HTTP/1.1 connections shared by all its tasks. The requests are the bytes an HTTP client sends, written
by hand (``Connections``): httpx2 costs the client about as much CPU per request as the server spends
answering it, and the clients share the machine's two cores with the server. Each task is polled
on its own schedule: ``tasks/get``,
then a sleep of the ``pollIntervalMs`` that answer gave (read again on every poll, as hosts do),
until the task is no longer working (``--poll-ms``: at that interval instead, to model a server that
said so). The first poll of each task is spread at random over one
interval.

Commands, one JSON object a line on stdin:

- ``{"cmd": "poll", "ids": [...]}``: start polling these task ids;
- ``{"cmd": "mark"}``: say how many polls have been answered so far, and the response times
  (milliseconds) of those since the last mark;
- ``{"cmd": "report"}``: say which tasks have completed, and when;
- ``{"cmd": "stop"}``: stop polling and exit.

JSON lines on stdout: ``{"event": "mark", ...}``, ``{"event": "report", "completed": [[task id,
seen_at], ...], ...}`` where ``seen_at`` is ``time.time()`` just after the poll that saw the task
completed was parsed, and ``{"event": "error", ...}`` for a task whose poll failed or that ended
other than completed with an answer.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

import anyio
import anyio.abc
import httpx2
from anyio.streams.buffered import BufferedByteStream

from _concurrency_client import describe, emit, raise_nofile
from _server import TOKEN

EXTENSION = "io.modelcontextprotocol/tasks"
VERSION = "2026-07-28"
#: task ids per subscriptions/listen stream (the server follows at most 1,000 a stream)
LISTEN_CHUNK = 1000


def task_meta(client_name: str) -> dict[str, Any]:
    """What a 2026-07-28 request carries in ``params._meta``: version, client, the tasks extension."""
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": client_name, "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
    }


def headers(method: str, name: str) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {TOKEN}",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        "Mcp-Name": name,
    }


async def rpc(
    http: httpx2.AsyncClient | Connections,
    url: str,
    number: int,
    method: str,
    name: str,
    params: dict[str, Any],
) -> dict[str, Any]:
    """One JSON-RPC request; its result, or RuntimeError with the error."""
    body = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
    if isinstance(http, Connections):
        data = await http.post(body, headers(method, name))
    else:
        response = await http.post(url, json=body, headers=headers(method, name))
        response.raise_for_status()
        data = response.json()
    if "error" in data:
        raise RuntimeError(f"{method} {name}: {data['error']}")
    return cast(dict[str, Any], data["result"])


async def exchange(conn: BufferedByteStream, request: bytes) -> tuple[str, bytes]:
    """Send one request; the response's status line and body (``Content-Length`` framed)."""
    await conn.send(request)
    status_line, *lines = (await conn.receive_until(b"\r\n\r\n", 65536)).decode().split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines)
    length = int(next(v for k, v in fields.items() if k.lower() == "content-length"))
    return status_line, await conn.receive_exactly(length)


class Connections:
    """Keep-alive HTTP/1.1 connections to one server, each taken by one request at a time."""

    def __init__(self, host: str, port: int, path: str, count: int) -> None:
        self.host, self.port, self.path, self.count = host, port, path, count
        self.send, self.take = anyio.create_memory_object_stream[BufferedByteStream | None](count)

    async def open(self) -> None:
        for _ in range(self.count):
            self.send.send_nowait(None)  # opened when first taken

    async def post(self, body: dict[str, Any], extra: dict[str, str]) -> dict[str, Any]:
        """POST ``body`` as JSON; the response's JSON (status 200 only)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in extra.items())
            + f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        conn = await self.take.receive()
        try:
            try:
                if conn is None:
                    conn = BufferedByteStream(await anyio.connect_tcp(self.host, self.port))
                    reused = False
                else:
                    reused = True
                status_line, content = await exchange(conn, head + data)
            except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                if not reused:
                    raise
                # the server closed a keep-alive connection that sat idle (uvicorn: after 5 s), as
                # the request went out: once more on a new one, as HTTP clients do (tasks/get is
                # idempotent)
                await conn.aclose()
                conn = BufferedByteStream(await anyio.connect_tcp(self.host, self.port))
                status_line, content = await exchange(conn, head + data)
        except BaseException:
            if conn is not None:
                await conn.aclose()
            self.send.send_nowait(None)
            raise
        self.send.send_nowait(conn)
        if status_line.split()[1] != "200":
            raise RuntimeError(f"{status_line}: {content[:200]!r}")
        return cast(dict[str, Any], json.loads(content))


@dataclass
class Poller:
    url: str
    client_name: str
    http: Connections
    polls: int = 0
    errors: int = 0
    times_ms: list[float] = field(default_factory=list)
    completed: list[tuple[str, float, int, str]] = field(default_factory=list)
    """(task id, when it was seen completed, the interval the task was last told, by poll or push)."""
    next_id: int = 0
    poll_ms: int = 0
    """When not 0: the interval to keep instead of the server's (a server that said this)."""
    told: dict[str, int] = field(default_factory=dict)
    """The pollIntervalMs each task still working was last told."""
    done: set[str] = field(default_factory=set)
    listening: int = 0

    def complete(self, task_id: str, task: dict[str, Any], seen: float, via: str) -> None:
        if task_id in self.done:
            return
        self.done.add(task_id)
        data = task.get("result", {}).get("structuredContent") or {}
        if data.get("status") == "answered":
            self.completed.append((task_id, seen, self.told.pop(task_id, 0), via))
        else:
            emit("error", task=task_id, error=f"completed without an answer: {data}")

    async def drive(self, task_id: str, first_in: float) -> None:
        await anyio.sleep(first_in)
        meta = task_meta(self.client_name)
        while task_id not in self.done:
            self.next_id += 1
            t0 = time.perf_counter()
            try:
                params = {"taskId": task_id, "_meta": meta}
                task = await rpc(self.http, self.url, self.next_id, "tasks/get", task_id, params)
            except Exception as exc:
                self.errors += 1
                emit("error", task=task_id, error=describe(exc))
                return
            seen = time.time()
            self.polls += 1
            self.times_ms.append((time.perf_counter() - t0) * 1000)
            if task["status"] == "completed":
                self.complete(task_id, task, seen, "poll")
                return
            if task["status"] != "working":
                emit("error", task=task_id, error=f"task {task['status']}: {task.get('statusMessage')}")
                return
            self.told[task_id] = task["pollIntervalMs"]
            await anyio.sleep((self.poll_ms or task["pollIntervalMs"]) / 1000)

    async def listen(self, task_ids: list[str], ready: anyio.Event) -> None:
        """One ``subscriptions/listen`` stream for these tasks (httpx2: one long response), taking
        each pushed ``notifications/tasks`` that says completed."""
        params = {"notifications": {"taskIds": task_ids}, "_meta": task_meta(self.client_name)}
        body = {
            "jsonrpc": "2.0",
            "id": f"listen-{task_ids[0]}",
            "method": "subscriptions/listen",
            "params": params,
        }
        extra = headers("subscriptions/listen", "")
        del extra["Mcp-Name"]
        timeout = httpx2.Timeout(30.0, read=None)
        try:
            async with (
                httpx2.AsyncClient(timeout=timeout, trust_env=False) as http,
                http.stream("POST", self.url, json=body, headers=extra) as response,
            ):
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    message = json.loads(line[5:])
                    if message.get("method") == "notifications/subscriptions/acknowledged":
                        self.listening += len(message["params"]["notifications"].get("taskIds", []))
                        ready.set()
                    elif message.get("method") == "notifications/tasks":
                        task = message["params"]
                        if task["status"] == "completed":
                            self.complete(task["taskId"], task, time.time(), "push")
        except Exception as exc:
            self.errors += 1
            emit("error", task=task_ids[0], error=f"listen: {describe(exc)}")
        finally:
            ready.set()

    async def commands(self, tg: anyio.abc.TaskGroup, interval: float) -> None:
        stdin = anyio.wrap_file(sys.stdin)
        async for line in stdin:
            command = json.loads(line)
            if command["cmd"] == "poll":
                for task_id in command["ids"]:
                    tg.start_soon(self.drive, task_id, random.uniform(0, interval))
            elif command["cmd"] == "listen":
                ids = command["ids"]
                for start in range(0, len(ids), LISTEN_CHUNK):
                    ready = anyio.Event()
                    tg.start_soon(self.listen, ids[start : start + LISTEN_CHUNK], ready)
                    await ready.wait()
                emit("listening", tasks=self.listening)
            elif command["cmd"] == "mark":
                wanted = sum(1000 / ms for ms in self.told.values() if ms)
                emit(
                    "mark",
                    polls=self.polls,
                    errors=self.errors,
                    times_ms=self.times_ms,
                    at=time.time(),
                    wanted=wanted,
                )
                self.times_ms = []
            elif command["cmd"] == "report":
                emit("report", completed=self.completed, polls=self.polls, errors=self.errors)
            elif command["cmd"] == "stop":
                break


async def run(args: argparse.Namespace) -> None:
    url = urlsplit(args.url)
    assert url.hostname is not None and url.port is not None
    connections = Connections(url.hostname, url.port, url.path, args.connections)
    await connections.open()
    async with anyio.create_task_group() as tg:
        poller = Poller(url=args.url, client_name=args.client_name, http=connections, poll_ms=args.poll_ms)
        emit("ready")
        await poller.commands(tg, args.interval)
        tg.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--client-name", required=True)
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--interval", type=float, required=True, help="seconds over which first polls spread")
    parser.add_argument("--poll-ms", type=int, default=0, help="poll this often, not at pollIntervalMs")
    args = parser.parse_args()
    raise_nofile()
    anyio.run(run, args)


if __name__ == "__main__":
    main()
