"""What an OAuth access token costs on ``/mcp``, against an agent token: one ``tools/call``, and the
credential check alone.

One in-process server (uvicorn on loopback, SQLite, ``server.oauth.issuer: builtin``). The OAuth
token comes the way a host gets it: registration, the operator's consent (signed-in session, CSRF),
the code exchanged with PKCE. The agent token is kept in the store as ``hitl-mcp agent add`` keeps
it. Then, for each token in turn (alternating rounds, so drift hits both alike):

(call)   ``--calls`` ``tools/call notify_user`` over one streamable HTTP session, each timed from
         the client's send to its result;
(check)  ``--checks`` runs of the check itself, ``Credentials.principal(token)`` (one indexed
         store read for either kind; the OAuth one also checks resource, expiry and scope).

    .venv/bin/python bench/oauth_call.py [--calls 300] [--checks 3000]

Prints a table, then one JSON line last on stdout.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from hitl_mcp.config import parse_config
from hitl_mcp.core.principal import AGENT_CREDENTIAL, token_digest
from hitl_mcp.runtime import Runtime
from hitl_mcp.serving import HttpServer, bind, setup_logging

WEB_TOKEN = "bench-web-token-0123456789abcdef"
REDIRECT = "http://127.0.0.1:9/callback"


async def oauth_token(http: httpx2.AsyncClient, base: str) -> str:
    r = await http.post(
        f"{base}/register",
        json={"redirect_uris": [REDIRECT], "client_name": "bench", "token_endpoint_auth_method": "none"},
    )
    client_id = r.json()["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    await http.get(f"{base}/login", params={"token": WEB_TOKEN})
    r = await http.get(
        f"{base}/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "s",
        },
    )
    page = (await http.get(r.headers["location"])).text
    fields = dict(re.findall(r'name="(csrf|request)" value="([^"]*)"', page))
    r = await http.post(f"{base}/oauth/consent", data={**fields, "decision": "allow"})
    code = re.search(r"code=([^&]+)", r.headers["location"]).group(1)  # type: ignore[union-attr]
    r = await http.post(
        f"{base}/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "code_verifier": verifier,
        },
    )
    token: str = r.json()["access_token"]
    return token


async def calls(url: str, token: str, n: int) -> list[float]:
    times: list[float] = []
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            for _ in range(10):  # warm up
                await client.call_tool("notify_user", {"message": "warm"})
            for i in range(n):
                start = time.perf_counter()
                await client.call_tool("notify_user", {"message": f"m{i}"})
                times.append(time.perf_counter() - start)
    return times


async def checks(credentials: Any, token: str, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        principal = await credentials.principal(token)
        times.append(time.perf_counter() - start)
        assert principal is not None
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
    }


async def main(args: argparse.Namespace) -> None:
    from hitl_mcp.web.credentials import Credentials

    setup_logging("warning")
    state = Path(tempfile.mkdtemp(prefix="hitl-bench-oauth-"))
    sock = bind("127.0.0.1", 0)
    assert sock is not None
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = parse_config(
        f"server: {{public_url: '{base}', oauth: {{issuer: builtin}}}}\n"
        f"channels: {{web: {{type: web, token: {WEB_TOKEN}}}}}\n",
        source="bench.yaml",
    )
    runtime = Runtime(config, state)
    runtime.inbox_url = base
    app = runtime.http_app(runtime.build_mcp(), "http", "127.0.0.1", sock.getsockname()[1])
    http_server = HttpServer(app, sock)
    web = anyio.create_task_group()
    results: dict[str, dict[str, list[float]]] = {
        "oauth": {"call": [], "check": []},
        "agent": {"call": [], "check": []},
    }
    async with anyio.create_task_group() as tg:
        await tg.start(runtime.run)
        await web.__aenter__()
        web.start_soon(http_server.run)
        async with httpx2.AsyncClient() as http:
            tokens = {"oauth": await oauth_token(http, base), "agent": secrets.token_urlsafe(32)}
        broker = await runtime.broker()
        await broker.store.add_credential(
            AGENT_CREDENTIAL, "bench", token_digest(tokens["agent"]), {}, "bench"
        )
        credentials = Credentials(runtime.auth, {}, runtime.broker, app.state.oauth)
        rounds = 3
        for r in range(rounds):
            for kind in ("oauth", "agent") if r % 2 == 0 else ("agent", "oauth"):
                print(f"round {r + 1}/{rounds}: {kind}", file=sys.stderr)
                results[kind]["call"] += await calls(f"{base}/mcp", tokens[kind], args.calls // rounds)
                results[kind]["check"] += await checks(credentials, tokens[kind], args.checks // rounds)
        http_server.stop()  # uvicorn closes its connections; the group waits for it
        await web.__aexit__(None, None, None)
        tg.cancel_scope.cancel()
    figures = {kind: {what: summary(times) for what, times in r.items()} for kind, r in results.items()}
    print(f"{'':8} {'tools/call median':>18} {'p95':>9} {'check median':>13} {'p95':>9}")
    for kind, f in figures.items():
        print(
            f"{kind:8} {f['call']['median_ms']:>15.2f} ms {f['call']['p95_ms']:>6.2f} ms "
            f"{f['check']['median_ms']:>10.3f} ms {f['check']['p95_ms']:>6.3f} ms"
        )
    print(json.dumps({"calls": args.calls, "checks": args.checks, **figures}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--checks", type=int, default=3000)
    anyio.run(main, parser.parse_args())
