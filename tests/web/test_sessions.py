"""Inbox sessions: server-side, expiring, rotated at sign-in, revoked by ``hitl-mcp logout --all``;
a cookie named for the port holding a random id the store keeps only as a hash. And the web-token
file: one others can read is made private before it is used."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
from pathlib import Path

import anyio
import httpx2
import pytest

from hitl_mcp.store.select import DB_FILE
from hitl_mcp.web import events
from tests.conftest import (
    TOKEN,
    cli,
    free_port,
    make_config,
    serve_args,
    server_env,
    server_process,
    write_config,
)
from tests.web.test_inbox_pages import EventReader, ask, serve_inbox

pytestmark = pytest.mark.anyio


def session_rows(state_dir: Path) -> list[tuple[str, float, float]]:
    with sqlite3.connect(state_dir / DB_FILE) as db:
        return db.execute("SELECT digest, created_at, expires_at FROM web_sessions").fetchall()


async def sign_in(web: httpx2.AsyncClient) -> httpx2.Response:
    r = await web.get("/login", params={"token": TOKEN})
    assert r.status_code == 303, r.text
    return r


async def test_cookie_is_named_for_the_port_strict_and_a_random_id_kept_only_as_a_hash(
    state_dir: Path,
) -> None:
    async with serve_inbox(state_dir, with_mcp=False) as inbox:
        port = inbox.url.rsplit(":", 1)[1]
        async with httpx2.AsyncClient(base_url=inbox.url) as web:
            r = await sign_in(web)
        name, _, rest = r.headers["set-cookie"].partition("=")
        value, *attributes = [part.strip() for part in rest.split(";")]
        assert name == f"hitl_session_{port}"
        flags = {a.split("=")[0].lower(): a.partition("=")[2] for a in attributes}
        assert "httponly" in flags and flags["samesite"].lower() == "strict" and flags["path"] == "/"
        assert flags["max-age"] == str(12 * 3600)
        assert len(value) >= 43 and TOKEN not in value and inbox.runtime.auth.csrf_for(value) != value
        (row,) = session_rows(state_dir)
        assert row[0] == hashlib.sha256(value.encode()).hexdigest()
        assert row[2] - row[1] == pytest.approx(12 * 3600, abs=1)
        assert value.encode() not in (state_dir / DB_FILE).read_bytes()
        # the cookie of another port is not ours, even with a live session's id
        async with httpx2.AsyncClient(base_url=inbox.url) as other:
            other.cookies.set("hitl_session_1", value)
            assert (await other.get("/")).status_code == 401
            other.cookies.set(name, value)
            assert (await other.get("/")).status_code == 200


async def test_sign_in_rotates_the_session_and_csrf_is_bound_to_it(state_dir: Path) -> None:
    async with serve_inbox(state_dir, with_mcp=False) as inbox:
        request = await ask(inbox.runtime)
        async with (
            httpx2.AsyncClient(base_url=inbox.url) as web,
            httpx2.AsyncClient(base_url=inbox.url) as tab,
        ):
            await sign_in(web)
            (name, first), *_ = web.cookies.items()
            await sign_in(tab)  # another browser's session is not touched by this one's sign-in
            await sign_in(web)
            second = web.cookies[name]
            assert second != first and len(session_rows(state_dir)) == 2
            assert (await web.get("/")).status_code == 200 and (await tab.get("/")).status_code == 200
            async with httpx2.AsyncClient(base_url=inbox.url, cookies={name: first}) as stale:
                assert (await stale.get("/")).status_code == 401
                assert (await stale.get("/api/requests")).status_code == 401
            # a CSRF token is worth something only with the session it was made for
            path = f"/requests/{request.id}/answer"
            old_csrf, tab_csrf = (
                inbox.runtime.auth.csrf_for(first),
                inbox.runtime.auth.csrf_for(tab.cookies[name]),
            )
            for wrong in (old_csrf, tab_csrf):
                assert (await web.post(path, data={"text": "x", "csrf": wrong})).status_code == 403
            ok = await web.post(path, data={"text": "x", "csrf": inbox.runtime.auth.csrf_for(second)})
            assert ok.status_code == 303


async def test_a_session_past_its_ttl_is_refused(state_dir: Path) -> None:
    config = make_config().model_copy(deep=True)
    config.channels["web"] = config.channels["web"].model_copy(update={"session_ttl": 60.0})
    async with serve_inbox(state_dir, with_mcp=False, config=config) as inbox:
        async with httpx2.AsyncClient(base_url=inbox.url) as web:
            r = await sign_in(web)
            assert "Max-Age=60;" in r.headers["set-cookie"]
            (row,) = session_rows(state_dir)
            assert row[2] - row[1] == pytest.approx(60, abs=1)
            assert (await web.get("/")).status_code == 200
            with sqlite3.connect(state_dir / DB_FILE) as db:  # a minute on: the expiry is in the past
                db.execute("UPDATE web_sessions SET expires_at = ?", (time.time() - 1,))
            page = await web.get("/")
            assert page.status_code == 401 and "Sign in" in page.text
            assert (await web.get("/api/requests")).status_code == 401
            assert (await web.get("/events")).status_code == 401
            await sign_in(web)  # signing in again starts a new one, and drops the expired row
            assert (await web.get("/")).status_code == 200 and len(session_rows(state_dir)) == 1


async def test_session_ttl_is_a_duration_in_range() -> None:
    from hitl_mcp.config import ConfigError, parse_config

    ok = parse_config("channels:\n  web: {type: web, session_ttl: 1h30m}\n", source="t.yaml")
    assert ok.channels["web"].session_ttl == 5400  # type: ignore[attr-defined]
    for bad in ("10s", "31d", "soon"):
        with pytest.raises(ConfigError, match="session_ttl"):
            parse_config(f"channels:\n  web: {{type: web, session_ttl: {bad}}}\n", source="t.yaml")


async def test_logout_all_through_the_cli_ends_every_session_at_once(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "PING_SECONDS", 0.2)  # a stream notices at its next ping
    async with serve_inbox(state_dir, with_mcp=False) as inbox:
        async with (
            httpx2.AsyncClient(base_url=inbox.url) as web,
            httpx2.AsyncClient(base_url=inbox.url) as phone,
        ):
            await sign_in(web)
            await sign_in(phone)
            async with phone.stream("GET", "/events") as stream:
                assert stream.status_code == 200
                reader = EventReader(stream)
                assert await reader.next() == ("hello", {})
                code, out, err = await cli(state_dir, "logout", "--all")
                assert code == 0, err
                assert "ended 2 inbox sessions" in out
                with anyio.fail_after(10):  # the open stream of a revoked session ends
                    async for _ in reader.lines:
                        pass
            assert session_rows(state_dir) == []
            for client in (web, phone):
                assert (await client.get("/")).status_code == 401
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            assert (await web.get("/api/requests", headers=bearer)).status_code == 200
            await sign_in(web)
            assert (await web.get("/")).status_code == 200
    code, out, err = await cli(state_dir, "logout")
    assert code == 2 and "--all" in err
    code, out, _ = await cli(state_dir, "logout", "--all")  # no server running: the same database
    assert code == 0 and "ended 1 inbox session;" in out


async def test_a_token_file_others_can_read_is_made_private_and_said_so(
    tmp_path: Path, state_dir: Path
) -> None:
    secret = "file-token-0123456789abcdef"
    token_file = state_dir / "web-token"
    token_file.write_text(secret + "\n")
    os.chmod(token_file, 0o644)
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    env = server_env(state_dir)
    del env["HITL_WEB_TOKEN"]
    async with server_process(serve_args(config, "--transport", "http"), env) as server:
        line = await server.wait_for_line("readable by other users")
        assert "mode 0644" in line and "0600" in line and str(token_file) in line
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}) as http:
            assert (await http.get(f"http://127.0.0.1:{port}/api/requests")).status_code == 200
        assert not any(secret in line for line in server.lines)
        assert sum("readable by other users" in line for line in server.lines) == 1
