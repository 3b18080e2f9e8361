"""A client that never finishes its request headers is cut off after ``server.http.header_timeout``;
one that has sent them (a long ``/events`` stream) is not. Raw sockets against a real server."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import anyio.abc
import pytest

from tests.conftest import (
    TOKEN,
    cli,
    free_port,
    serve_args,
    server_env,
    server_process,
    write_config,
)

pytestmark = pytest.mark.anyio

BOUND = 1.0


async def closed_after(stream: anyio.abc.ByteStream, sent: bytes) -> float:
    """Send ``sent``, then wait for the server to close the connection; the seconds it took."""
    start = time.monotonic()
    if sent:
        await stream.send(sent)
    with anyio.fail_after(BOUND + 5):
        try:
            while await stream.receive():
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
            pass
    return time.monotonic() - start


async def read_until(stream: anyio.abc.ByteStream, needle: bytes) -> bytes:
    seen = b""
    with anyio.fail_after(10):
        while needle not in seen:
            seen += await stream.receive()
    return seen


async def test_unfinished_headers_are_cut_off_and_finished_ones_are_not(
    tmp_path: Path, state_dir: Path
) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    config.write_text(config.read_text().replace("port: ", f"header_timeout: {BOUND}, port: "))
    assert f"header_timeout: {BOUND}" in config.read_text()
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        host = f"127.0.0.1:{port}".encode()
        # a long-lived response whose headers came in time: it outlives the bound
        async with await anyio.connect_tcp("127.0.0.1", port) as events:
            await events.send(
                b"GET /events HTTP/1.1\r\nHost: "
                + host
                + b"\r\nAuthorization: Bearer "
                + TOKEN.encode()
                + b"\r\n\r\n"
            )
            assert b"event: hello" in await read_until(events, b"event: hello")
            for sent in (b"GET / HT", b"GET /api/requests HTTP/1.1\r\nHost: " + host + b"\r\nX-Slow: 1", b""):
                async with await anyio.connect_tcp("127.0.0.1", port) as slow:
                    took = await closed_after(slow, sent)
                    assert BOUND * 0.9 <= took < BOUND + 4, (sent, took)
            # a keep-alive connection: a first request answered, then half of a second one
            async with await anyio.connect_tcp("127.0.0.1", port) as kept:
                await kept.send(b"GET /healthz HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
                assert b"200 OK" in await read_until(kept, b'"status":"ok"')
                took = await closed_after(kept, b"GET /healthz HTTP/1.1\r\nHost: ")
                assert took < BOUND + 4
            # the stream is still served: an event written now (by the CLI, in another process) arrives
            code, _, err = await cli(state_dir, "test-channel", "web", "--config", str(config))
            assert code == 0, err
            assert b"event: change" in await read_until(events, b"event: change")
