"""The gate forwards only what a person approved on a person channel (the trust issue, item 1).

As it was found: a ``hitl-mcp proxy`` asks with the config's defaults, which include the host's
form; a ``hitl-mcp serve --transport http`` shares its database (the documented set-up for hooks); a
second client declares the proxy's caller's name, finds the request, is shown the form and approves,
and the upstream is called. Now the proxy never routes its approval to a form, the request belongs
to the proxy's own principal, and the upstream (the marker server: it leaves a mark when called) is
called only after the person approves in the inbox.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.types import Implementation

from hitl_mcp.broker import AskDefaults, Broker
from hitl_mcp.core.models import Reply
from hitl_mcp.store.sqlite import SqliteStore
from tests.conftest import TOKEN, bearer, free_port, serve_args, server_env, server_process, text_of
from tests.gate.test_proxy import MARKER, Gate, connected
from tests.mcp.test_elicitation import Host, accept
from tests.mcp.test_tasks import raw

pytestmark = pytest.mark.anyio


async def test_an_impostor_sharing_the_database_cannot_approve_a_proxied_call(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n")  # the server config names no channels: web and the form
    serve_port = free_port()
    serve_config = tmp_path / "serve.yaml"
    serve_config.write_text(gate.config.read_text().replace(str(gate.port), str(serve_port)))
    result = None
    async with connected(gate.params(MARKER)) as proxied:

        async def call() -> None:
            nonlocal result
            result = await proxied.call_tool("touch", {"name": "prod"}, progress_callback=gate.on_progress)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            request_id = await gate.waiting_request()
            request = await gate.request(request_id)
            assert request["channels"] == ["web"]  # never the host's form
            assert request["owner"] == "stdio:mcp"  # the proxy's host (the SDK client's default name)

            # the impostor: a server on the same database, a client that says it is the proxy's caller
            env = server_env(gate.state_dir)
            async with server_process(serve_args(serve_config, "--transport", "http"), env):
                form = Host(accept(decision="approve"))
                impostor = bearer(f"http://127.0.0.1:{serve_port}/mcp", TOKEN)
                async with Client(
                    impostor,
                    mode="legacy",
                    client_info=Implementation(name="mcp", version="1"),
                    elicitation_callback=form,
                ) as other:
                    assert (await raw(other, "tasks/list", {}))["tasks"] == []
                    waited = await other.call_tool(
                        "wait_for_response", {"request_id": request_id, "wait_seconds": 1}
                    )
                    assert waited.is_error and "no question or approval" in text_of(waited)
                assert form.shown == []
            assert gate.marks() == []  # nothing was forwarded
            await gate.reply(request_id, "approve")
    assert result is not None and not result.is_error, text_of(result)
    assert gate.marks() == ["prod plain"]


async def test_a_gate_whose_channels_are_only_the_host_form_asks_nobody_and_forwards_nothing(
    tmp_path: Path,
) -> None:
    config = "channels:\n  web: {type: web}\n  form: {type: elicitation}\n"
    gate = Gate(tmp_path, "default: ask\nchannels: [form]\n", config)
    async with connected(gate.params(MARKER)) as proxied:
        result = await proxied.call_tool("touch", {"name": "prod"})
    assert result.is_error
    assert "the gate never asks" in text_of(result) and "person channel" in text_of(result)
    assert gate.marks() == []


async def test_an_approval_recorded_from_a_form_is_never_forwarded(tmp_path: Path) -> None:
    """Belt and braces: even if a form's approval reached the row (written by another process), the
    proxy checks the channel it came from before it forwards."""
    config = "channels:\n  web: {type: web}\n  form: {type: elicitation}\n"
    gate = Gate(tmp_path, "default: ask\n", config)
    result = None
    async with connected(gate.params(MARKER)) as proxied:

        async def call() -> None:
            nonlocal result
            result = await proxied.call_tool("touch", {"name": "prod"}, progress_callback=gate.on_progress)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            request_id = await gate.waiting_request()
            store = SqliteStore(gate.state_dir / "hitl.sqlite3")
            await store.open()
            try:
                broker = Broker(store, {}, AskDefaults({}, {}), state_dir=gate.state_dir)
                form_answer = Reply(channel="form", responder="host form (mcp)", decision="approve")
                assert (await broker.resolve(request_id, form_answer)).won
            finally:
                await store.close()
    assert result is not None and result.is_error
    assert "did not come from a person channel" in text_of(result)
    assert gate.marks() == []
