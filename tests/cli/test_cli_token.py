"""server.cli.require_token: answer, approve and deny go through the running server's API with the
web token, and never write the database themselves."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import TOKEN, bearer, free_port, sc, serve_args, server_env, server_process
from tests.conftest import cli as hitl

pytestmark = pytest.mark.anyio


def status(state_dir: Path, rid: str) -> str:
    with sqlite3.connect(state_dir / "hitl.sqlite3") as db:
        return str(db.execute("SELECT status FROM requests WHERE id = ?", (rid,)).fetchone()[0])


async def test_answering_verbs_need_the_token_and_go_through_the_server(
    tmp_path: Path, state_dir: Path
) -> None:
    port = free_port()
    config = tmp_path / "hitl.yaml"
    config.write_text(f"server:\n  http: {{host: 127.0.0.1, port: {port}}}\n  cli: {{require_token: true}}\n")
    url = f"http://127.0.0.1:{port}"
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        async with Client(bearer(f"{url}/mcp")) as client:
            approval = sc(await client.call_tool("request_approval", {"action": "Deploy", "wait_seconds": 0}))
            question = sc(await client.call_tool("ask_user", {"question": "Region?", "wait_seconds": 0}))
        aid, qid = approval["request_id"], question["request_id"]
        cfg = ["--config", str(config)]

        # no token: refused, and the request is untouched
        code, out, err = await hitl(state_dir, "approve", aid, *cfg, HITL_WEB_TOKEN="")
        assert code == 1 and out == ""
        assert err == (
            "hitl-mcp: server.cli.require_token is set: answering goes through the server's API and needs"
            " the web token ($HITL_WEB_TOKEN or --token-file)\n"
        )
        # a wrong token: the server refuses it
        wrong = tmp_path / "wrong-token"
        wrong.write_text("not-the-token\n")
        code, _, err = await hitl(
            state_dir, "approve", aid, *cfg, "--token-file", str(wrong), HITL_WEB_TOKEN=""
        )
        assert code == 1 and err == f"hitl-mcp: the server at {url} refused the web token (401)\n"
        assert status(state_dir, aid) == "pending"

        # the right token from a file, and a unique start of the id
        right = tmp_path / "token"
        right.write_text(TOKEN + "\n")
        code, out, err = await hitl(
            state_dir,
            "deny",
            aid[:6],
            "--comment",
            "not today",
            *cfg,
            "--token-file",
            str(right),
            HITL_WEB_TOKEN="",
        )
        assert code == 0 and out == f"{aid}: denied\n", err
        code, out, err = await hitl(state_dir, "answer", qid, "eu-west-1", *cfg)  # $HITL_WEB_TOKEN
        assert code == 0 and out == f"{qid}: eu-west-1\n", err
        code, _, err = await hitl(state_dir, "answer", qid, "us-east-1", *cfg)
        assert code == 1 and err.startswith("hitl-mcp: not recorded: already answered by operator via web")

        async with Client(bearer(f"{url}/mcp")) as client:
            pending = sc(await client.call_tool("ask_user", {"question": "Later?", "wait_seconds": 0}))
    with sqlite3.connect(state_dir / "hitl.sqlite3") as db:
        replies = db.execute("SELECT request_id, channel, responder, won FROM replies ORDER BY id").fetchall()
    # every reply came in through the server's API (the web channel), none from the CLI's own process
    assert replies == [
        (aid, "web", "operator", 1),
        (qid, "web", "operator", 1),
        (qid, "web", "operator", 0),
    ]

    # the server is gone: the CLI says so, and does not fall back to writing the database
    rid = pending["request_id"]
    code, _, err = await hitl(state_dir, "answer", rid, "now", *cfg)
    assert code == 1 and err.startswith(f"hitl-mcp: cannot reach the server at {url} to answer: ")
    assert len(err.splitlines()) == 1 and status(state_dir, rid) == "pending"
