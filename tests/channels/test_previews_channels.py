"""Each channel shows an approval's preview whole with Approve and Deny, or, when it does not fit, the
first lines, a summary ("+N lines not shown"), Deny and "Review and approve in the inbox", never an
Approve: Slack's blocks, Telegram's HTML and keyboard, ntfy's message and actions through their real
client libraries against the stand-ins; SMS, mail and the host's form from what they compose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.channels import elicitation
from hitl_mcp.channels.email.compose import ROOM as MAIL_ROOM
from hitl_mcp.channels.email.compose import _preview_body
from hitl_mcp.channels.fitting import INBOX_ACTION
from hitl_mcp.channels.twilio_sms.text import ROOM as SMS_ROOM
from hitl_mcp.channels.twilio_sms.text import compose as sms_text
from hitl_mcp.core.models import Kind, Request, now
from hitl_mcp.core.previews import as_text, fit, normalise, preview_sha256
from tests.channels.test_ntfy import notified, ntfy_broker, ntfy_config
from tests.channels.test_ntfy import standin as ntfy_standin
from tests.channels.test_slack import PUBLIC, posted, slack_broker, slack_config
from tests.channels.test_telegram import delivered, tg, tg_config
from tests.channels.test_telegram import standin as tg_standin
from tests.support.harness import channel_broker
from tests.support.ntfy_standin import NtfyStandin
from tests.support.previews import COMMAND, DIFF, SQL, long_diff
from tests.support.slack import SlackStandin
from tests.support.telegram_standin import TelegramStandin

pytestmark = pytest.mark.anyio
__all__ = ["ntfy_standin", "tg_standin"]

LONG = long_diff(1000)  # 2,000 changed lines: too long for any chat message


def approval(preview: dict[str, Any]) -> AskSpec:
    return AskSpec(kind=Kind.APPROVAL, text="Apply the change", preview=preview)


def request_with(preview: dict[str, Any], **fields: Any) -> Request:
    stored = normalise(preview)
    return Request(
        id="a1b2c3d4e5f60718",
        kind=Kind.APPROVAL,
        text="Apply the change",
        preview=stored,
        preview_sha256=preview_sha256(stored),
        created_at=now(),
        **fields,
    )


async def test_slack_shows_a_preview_that_fits_with_approve_and_one_that_does_not_without(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url), PUBLIC) as (broker, _):
        short, _ = await broker.ask(approval(DIFF))
        message = await posted(stand)
        text = message.all_text()
        assert all(line.replace("&", "&amp;") in text for line in as_text(normalise(DIFF)).splitlines())
        actions = next(b for b in message.blocks if b["type"] == "actions")
        assert [e["action_id"] for e in actions["elements"]][:2] == ["approve", "deny"]
        assert f"preview SHA-256 `{short.preview_sha256[:12]}…`" in text  # type: ignore[index]

        long, _ = await broker.ask(approval(LONG))
        message = await posted(stand, 2)
        actions = next(b for b in message.blocks if b["type"] == "actions")
        assert [e["action_id"] for e in actions["elements"]] == ["open_inbox", "deny"]
        assert actions["elements"][0]["url"] == f"{PUBLIC}/requests/{long.id}"
        assert actions["elements"][0]["text"]["text"] == INBOX_ACTION
        assert "approve" not in json.dumps(actions).replace("open_inbox", "").replace(INBOX_ACTION, "")
        assert "lines not shown" in message.all_text()
        assert all(len(b["text"]["text"]) <= 3000 for b in message.blocks if b["type"] == "section")


async def test_telegram_shows_the_whole_preview_or_deny_and_a_link_to_the_inbox(
    tmp_path: Path, tg_standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = tg_standin
    async with channel_broker(tmp_path, tg(tg_config(url)), public_url=PUBLIC) as broker:
        short, _ = await broker.ask(approval(COMMAND))
        sent = await delivered(stand, broker, short)
        assert "$ rm -rf build/ &amp;&amp; make dist" in sent.html and "<pre>" in sent.html
        assert "deletes recursively without asking" in sent.text  # why the risk is high
        labels = [b["text"] for row in sent.reply_markup["inline_keyboard"] for b in row]  # type: ignore[index]
        assert labels[:2] == ["✅ Approve", "⛔ Deny"]

        long, _ = await broker.ask(approval(LONG))
        sent = await delivered(stand, broker, long)
        rows = sent.reply_markup["inline_keyboard"]  # type: ignore[index]
        assert [[b["text"] for b in row] for row in rows] == [["⛔ Deny"], [f"🔎 {INBOX_ACTION}"]]
        assert rows[1][0]["url"] == f"{PUBLIC}/requests/{long.id}"
        assert "lines not shown" in sent.text and len(sent.html) <= 4096


async def test_ntfy_offers_approve_only_for_a_preview_it_sends_whole(
    tmp_path: Path, ntfy_standin: tuple[NtfyStandin, str]
) -> None:
    stand, url = ntfy_standin
    async with ntfy_broker(tmp_path, ntfy_config(url, show_payload=True), PUBLIC) as (broker, _):
        short, _ = await broker.ask(approval(SQL))
        sent = await notified(stand, request=short)
        assert SQL["statement"] in sent["message"]
        assert [a["label"] for a in sent["actions"]] == ["Approve", "Deny"]
        long, _ = await broker.ask(approval(LONG))
        sent = await notified(stand, request=long)
        assert [a["label"] for a in sent["actions"]] == [INBOX_ACTION, "Deny"]
        assert {k: v for k, v in sent["actions"][0].items() if k != "id"} == {
            "action": "view",
            "label": INBOX_ACTION,
            "url": f"{PUBLIC}/requests/{long.id}",
        }
        assert "lines not shown" in sent["message"] and len(sent["message"].encode()) <= 4096
    async with ntfy_broker(tmp_path / "private", ntfy_config(url), PUBLIC) as (broker, _):
        hidden, _ = await broker.ask(approval(SQL))  # show_payload off: the preview is not sent at all
        sent = await notified(stand, request=hidden)
        assert SQL["statement"] not in sent["message"]
        assert [a["label"] for a in sent["actions"]] == [INBOX_ACTION, "Deny"]


def test_sms_sends_a_short_preview_whole_and_never_yes_for_a_long_one() -> None:
    short = request_with(COMMAND)
    shown = fit(short.preview, SMS_ROOM.size)  # type: ignore[arg-type]
    text = sms_text(short, "4821", None, shown, True)
    assert "$ rm -rf build/ && make dist" in text and "Reply YES 4821 or NO 4821" in text
    long = request_with(LONG)
    shown = fit(long.preview, SMS_ROOM.size)  # type: ignore[arg-type]
    text = sms_text(long, "4821", "https://hitl.example/requests/x", shown, False)
    assert not shown.whole and "lines not shown" in text
    assert "YES" not in text and "Reply NO 4821 to deny; approve it in the hitl-mcp inbox" in text


def test_mail_shows_the_whole_preview_up_to_its_room() -> None:
    diff = request_with(DIFF)
    shown = fit(diff.preview, MAIL_ROOM.size)  # type: ignore[arg-type]
    assert shown.whole and _preview_body(shown) == as_text(diff.preview)  # type: ignore[arg-type]
    huge = request_with(long_diff(2000))
    shown = fit(huge.preview, MAIL_ROOM.size)  # type: ignore[arg-type]
    body = _preview_body(shown)
    assert not shown.whole and "lines not shown" in body and INBOX_ACTION in body


def test_the_host_form_offers_approve_only_when_the_preview_fits_its_message() -> None:
    short = request_with(SQL)
    form = elicitation.render(short, [], True, fit(short.preview, elicitation.ROOM_CHARS))  # type: ignore[arg-type]
    assert SQL["statement"] in form.message and form.schema["properties"]["decision"]["enum"] == [
        "approve",
        "deny",
    ]
    long = request_with(LONG)
    shown = fit(long.preview, elicitation.ROOM_CHARS)  # type: ignore[arg-type]
    form = elicitation.render(long, ["web"], not not shown.whole, shown)
    assert form.schema["properties"]["decision"]["enum"] == ["deny"]
    assert "below the whole preview" in form.message and "lines not shown" in form.message
