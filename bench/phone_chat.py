"""Team chats, push and tap: Discord (gateway), Mattermost (WebSocket), Matrix (/sync long poll) and
Microsoft Teams (an HTTPS POST of a Bot Framework activity), with 1,000 requests pending, as
phone_push.py and phone_tap.py measure Telegram, ntfy and the webhook.

A ``hitl-mcp serve --transport http`` subprocess (bench/_server.py) runs the four channels with their
real client libraries (discord.py, httpx2 and websockets, matrix-nio, the Teams SDK and MSAL) against
the test suite's stand-ins served in this process (tests/support/discord_standin.py,
mattermost_standin.py, matrix_standin.py, teams_standin.py), each noting with ``time.perf_counter()``
when it takes a push and when it makes a press available. The agent is the SDK's client over streamable HTTP.

- push: ``ask_user`` with ``wait_seconds: 0``, from just before the call to the stand-in taking the
  message (Discord ``POST /channels/…/messages``, Mattermost ``POST /posts``, Matrix ``PUT …/send``);
- tap: a held ``request_approval``; once its message is sent, a press is made available: Discord
  sends ``INTERACTION_CREATE`` down the gateway (Approve), Mattermost sends ``reaction_added`` ✅ down
  the WebSocket, Matrix queues an ✅ ``m.reaction`` for the held ``/sync``, Teams POSTs the Approve
  button's ``adaptiveCard/action`` invoke (its token signed) to the bot's endpoint; until the call's
  result.

Setup, not measured: N questions asked on the three channels and left pending, every delivery done.
The first 10 per channel warm up.

    .venv/bin/python bench/phone_chat.py [--pending N] [--samples K]

Prints a table (milliseconds; percentiles by nearest rank), then one JSON line per channel and
measure, last on stdout.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from _phone import CLIENT_INFO, Arrivals, command_line, machine, summary
from _server import ROOT, TOKEN, server, wait_delivered

if str(ROOT) not in sys.path:  # the stand-ins live in the clone's tests/support
    sys.path.append(str(ROOT))

from tests.support import discord_standin as dc
from tests.support import matrix_standin as mx
from tests.support import mattermost_standin as mm
from tests.support import teams_standin as tm
from tests.support.mail import Certs
from tests.support.serve import serving

CHANNELS = ("discord", "mattermost", "matrix", "teams")
HOW = {
    "discord": "gateway WebSocket",
    "mattermost": "WebSocket",
    "matrix": "/sync long poll",
    "teams": "Bot Framework activity POST",
}
GOALS_P99_MS = {"discord": 100.0, "mattermost": 100.0, "matrix": 1000.0, "teams": 100.0}
WARM_UP = 10
SETUP_TASKS = 20


class TimedDiscord(dc.DiscordStandin):
    def __init__(self) -> None:
        super().__init__()
        self.arrivals = Arrivals()

    async def _create(self, request: Any) -> Any:
        response = await super()._create(request)
        if response.status_code == 200:
            message = self.messages[max(self.messages)]
            self.arrivals.note(message.content, message)
        return response


class TimedMattermost(mm.MattermostStandin):
    def __init__(self) -> None:
        super().__init__()
        self.arrivals = Arrivals()

    async def _create(self, request: Any) -> Any:
        response = await super()._create(request)
        post = list(self.posts.values())[-1]
        if not post.root_id:
            self.arrivals.note(post.message, post)
        return response


class TimedMatrix(mx.MatrixStandin):
    def __init__(self) -> None:
        super().__init__()
        self.arrivals = Arrivals()

    def _add(self, event: mx.Event) -> mx.Event:
        added = super()._add(event)
        if event.sender == mx.BOT and "m.relates_to" not in event.content:
            self.arrivals.note(str(event.content.get("body") or ""), event)
        return added


class TimedTeams(tm.TeamsStandin):
    def __init__(self) -> None:
        super().__init__()
        self.arrivals = Arrivals()

    async def _create(self, request: Any) -> Any:
        count = len(self.order)
        response = await super()._create(request)
        if len(self.order) > count:  # a new card, not a reply
            message = self.last()
            self.arrivals.note(" ".join(message.texts()), message)
        return response


@dataclass
class Bench:
    discord: TimedDiscord
    mattermost: TimedMattermost
    matrix: TimedMatrix
    teams: TimedTeams
    http: httpx2.AsyncClient
    client: Client

    def stand(self, channel: str) -> Any:
        return getattr(self, channel)


def config(discord_url: str, mattermost_url: str, matrix_url: str, teams: TimedTeams, entra: str) -> str:
    return (
        "channels:\n"
        "  web: {type: web}\n"
        f'  discord: {{type: discord, bot_token: "{dc.BOT_TOKEN}", channel_id: {dc.CHANNEL},\n'
        f'            allowed_users: [{dc.SAM}], api_base: "{discord_url}"}}\n'
        f'  mattermost: {{type: mattermost, url: "{mattermost_url}", bot_token: "{mm.TOKEN}",\n'
        f'               channel_id: "{mm.CHANNEL}", allowed_users: ["{mm.SAM}"]}}\n'
        f'  matrix: {{type: matrix, homeserver: "{matrix_url}", user_id: "{mx.BOT}",\n'
        f'           access_token: "{mx.TOKEN}", room_id: "{mx.ROOM}", allowed_users: ["{mx.SAM}"]}}\n'
        f'  teams: {{type: teams, app_id: "{tm.APP_ID}", app_password: "{tm.SECRET}",\n'
        f'          conversation_id: "{tm.CONVERSATION}", service_url: "{teams.service_url}",\n'
        f'          allowed_users: ["{tm.SAM}"], endpoints: {{login: "{entra}",\n'
        f'          openid_metadata: "{teams.base}/v1/.well-known/openidconfiguration",\n'
        f'          token_issuer: "{tm.ISSUER}"}}}}\n'
    )


@asynccontextmanager
async def chat_bench() -> AsyncIterator[Bench]:
    discord, mattermost, matrix, teams = TimedDiscord(), TimedMattermost(), TimedMatrix(), TimedTeams()
    with tempfile.TemporaryDirectory(prefix="hitl-bench-") as tmp:
        # Entra is served over HTTPS (MSAL insists): the server trusts the test CA through requests
        certs = Certs.make(Path(tmp) / "certs")
        os.environ["REQUESTS_CA_BUNDLE"] = str(certs.ca_file)
        async with (
            serving(discord.app, shutdown_seconds=1) as discord_url,
            serving(mattermost.app, shutdown_seconds=1) as mattermost_url,
            serving(matrix.app, shutdown_seconds=1) as matrix_url,
            serving(teams.app, shutdown_seconds=1) as teams.base,
            serving(teams.entra_app, shutdown_seconds=1, ssl_certfile=str(certs.server_pem)) as entra,
        ):
            try:
                entra = entra.replace("http://", "https://")
                channels = config(discord_url, mattermost_url, matrix_url, teams, entra)
                async with server(Path(tmp), channels=channels) as (_, port):
                    base = f"http://127.0.0.1:{port}"
                    headers = {"Authorization": f"Bearer {TOKEN}"}
                    async with (
                        httpx2.AsyncClient(base_url=base, headers=headers, timeout=60) as http,
                        create_mcp_http_client(headers=headers) as mcp_http,  # /mcp needs a credential
                        Client(
                            streamable_http_client(f"{base}/mcp", http_client=mcp_http),
                            mode="legacy",
                            client_info=CLIENT_INFO,
                        ) as client,
                    ):
                        await discord.connected()
                        await mattermost.connected()
                        yield Bench(discord, mattermost, matrix, teams, http, client)
            finally:
                matrix.close()


async def make_pending(bench: Bench, count: int) -> None:
    ids: list[str] = []
    queue = iter(range(count))

    async def asker() -> None:
        for i in queue:
            result = await bench.client.call_tool(
                "ask_user",
                {
                    "question": f"bench-pending-all-{i}: waiting",
                    "channels": list(CHANNELS),
                    "wait_seconds": 0,
                },
            )
            assert result.structured_content is not None, result.content
            ids.append(result.structured_content["request_id"])

    async with anyio.create_task_group() as tg:
        for _ in range(SETUP_TASKS):
            tg.start_soon(asker)
    await wait_delivered(bench.http, ids)


async def wait_sent(bench: Bench, request_id: str) -> None:
    with anyio.fail_after(10):
        while True:
            response = await bench.http.get(f"/api/requests/{request_id}")
            deliveries = response.json()["deliveries"]
            if deliveries and all(d["status"] not in ("queued", "sending") for d in deliveries):
                return
            await anyio.sleep(0.005)


async def push(bench: Bench, channel: str, marker: str) -> float:
    t0 = time.perf_counter()
    result = await bench.client.call_tool(
        "ask_user", {"question": f"{marker}: which region?", "channels": [channel], "wait_seconds": 0}
    )
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{marker}: tool error {result.content}")
    at, _ = await bench.stand(channel).arrivals.wait(marker)
    await wait_sent(bench, result.structured_content["request_id"])
    return (at - t0) * 1000


async def press(bench: Bench, channel: str, marker: str) -> tuple[float, str]:
    """Wait for the held call's message and its delivery, make a press available; when, and the id."""
    _, doc = await bench.stand(channel).arrivals.wait(marker)
    if channel == "discord":
        rid = doc.button("Approve")["custom_id"].split(".")[0]
        await wait_sent(bench, rid)
        t0 = time.perf_counter()
        await bench.discord.press(doc, "Approve", dc.SAM)
    elif channel == "mattermost":
        rid = doc.message.split("id `")[1].split("`")[0]
        await wait_sent(bench, await full_id(bench, rid))
        t0 = time.perf_counter()
        await bench.mattermost.react(doc, "white_check_mark", mm.SAM)
    elif channel == "teams":
        rid = doc.button("Approve")["data"]["hitl"]
        await wait_sent(bench, rid)
        # the activity and its token are made before the clock starts, as Teams has them ready
        activity = bench.teams.invoke(doc, "Approve", tm.SAM)
        headers = {"Authorization": f"Bearer {bench.teams.token_for()}"}
        t0 = time.perf_counter()
        pressed = await bench.http.post("/webhooks/teams/api/messages", json=activity, headers=headers)
        assert pressed.status_code == 200, pressed.text
    else:
        rid = doc.content["body"].split(" · id ")[1].split()[0]
        await wait_sent(bench, await full_id(bench, rid))
        t0 = time.perf_counter()
        bench.matrix.react(doc, "✅", mx.SAM)
    return t0, rid


async def full_id(bench: Bench, short: str) -> str:
    response = await bench.http.get(
        "/api/requests", params={"status": "pending", "limit": 20}
    )  # newest first
    found = [r["id"] for r in response.json()["requests"] if r["id"].startswith(short)]
    assert len(found) == 1, (short, found)
    return str(found[0])


async def tap(bench: Bench, channel: str, marker: str) -> float:
    done = anyio.Event()
    held: dict[str, Any] = {}

    async def call() -> None:
        result = await bench.client.call_tool(
            "request_approval", {"action": f"{marker}: deploy v3", "channels": [channel], "wait_seconds": 120}
        )
        held["t1"], held["result"] = time.perf_counter(), result.structured_content
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        t0, _ = await press(bench, channel, marker)
        with anyio.fail_after(30):
            await done.wait()
    if not held["result"] or held["result"].get("approved") is not True:
        raise RuntimeError(f"{marker}: wrong result {held['result']}")
    return (held["t1"] - t0) * 1000


async def main(pending: int, samples: int) -> None:
    async with chat_bench() as bench:
        started = time.perf_counter()
        await make_pending(bench, pending)
        print(f"{pending} pending after {time.perf_counter() - started:.1f} s (setup)", file=sys.stderr)
        pushes: dict[str, list[float]] = {c: [] for c in CHANNELS}
        taps: dict[str, list[float]] = {c: [] for c in CHANNELS}
        for i in range(WARM_UP + samples):
            for channel in CHANNELS:
                pushed = await push(bench, channel, f"bench-push-{channel}-{i}")
                tapped = await tap(bench, channel, f"bench-tap-{channel}-{i}")
                if i >= WARM_UP:
                    pushes[channel].append(pushed)
                    taps[channel].append(tapped)
    columns = ["measure", "channel", "samples", "p50_ms", "p99_ms", "max_ms", "mean_ms", "goal_p99_ms"]
    rows = []
    for measure, data in (("push", pushes), ("tap", taps)):
        for channel in CHANNELS:
            goal = 100.0 if measure == "push" else GOALS_P99_MS[channel]
            rows.append(
                {"measure": measure, "channel": channel, **summary(data[channel]), "goal_p99_ms": goal}
            )
    print(" ".join(f"{c:>11}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]:>11.2f}" if isinstance(row[c], float) else f"{row[c]:>11}" for c in columns))
    where = machine()
    for row in rows:
        line = {
            "bench": f"phone_{row['measure']}_{row['channel']}",
            "via": HOW[row["channel"]],
            "pending": pending,
        }
        line.update({k: row[k] for k in ("samples", "p50_ms", "p99_ms", "max_ms", "goal_p99_ms")})
        line["machine"] = where
        print(json.dumps(line))


if __name__ == "__main__":
    command_line(__doc__ or "", main)
