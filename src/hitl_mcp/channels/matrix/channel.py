"""Matrix: the channel. Requests go to one room as messages; answers come over ``/sync`` (a long poll:
no public URL) as reactions on the request's event (✅ / ❌ / 1️⃣ …) or replies to it (in reply or in
its thread), from ``allowed_users`` only; the message is edited (``m.replace``) on settle."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import anyio

from hitl_mcp.channels._replies import choice_by_number, decision_of
from hitl_mcp.channels.base import Answered, ChannelConfig, Counted, Delivery, DeliveryError, Hub, allowed
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.fitting import Room, shown
from hitl_mcp.channels.matrix.api import call, encryption_available, new_client, require_library
from hitl_mcp.channels.matrix.config import HTTP_TIMEOUT, SYNC_RETRY, Config, log
from hitl_mcp.channels.matrix.render import (
    ROOM,
    decision_of_key,
    edit,
    in_thread,
    message,
    number_of_key,
    outcome_line,
    reminder,
)
from hitl_mcp.core.models import Kind, Reply, Request

HIGH_RISK = "Not recorded: approve a high-risk action in the hitl-mcp inbox (❌ or “no” denies it here)."
ENCRYPTED = (
    "room {room} is end-to-end encrypted, and matrix-nio's encryption (its e2e extra: python-olm and "
    "libolm) is not installed here: use an unencrypted room for hitl-mcp"
)


class MatrixChannel(BaseChannel):
    type = "matrix"
    extra: ClassVar[str | None] = "matrix"
    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        self._client: Any = None

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("nio",)

    def preview_room(self) -> Room:
        return ROOM

    def _nio(self) -> Any:
        if self._client is None:
            self._client = new_client(self.config)
        return self._client

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        require_library()
        if not self.config.answerers:
            log.warning("matrix %s: allowed_users is empty: nobody may answer", self.name)
        self.in_background(self._sync_forever, exclusive=True)  # one /sync among replicas

    async def close(self) -> None:
        await self.stop_background()
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.close()

    async def check(self) -> str:
        client = new_client(self.config)
        try:
            me = await call(client.whoami(), "whoami", self.config)
            problem = await self._encrypted(client)
        finally:
            await client.close()
        if problem:
            raise DeliveryError(problem, permanent=True)
        parts = [f"ok: {me.user_id} posts to {self.config.room_id} (unencrypted); answers over /sync"]
        if not self.config.answerers:
            parts.append("warning: allowed_users is empty: nobody may answer")
        return "; ".join(parts)

    async def _encrypted(self, client: Any) -> str | None:
        """Why the room cannot be used (encrypted, and no encryption here), or None."""
        room = self.config.room_id
        state = await call(
            client.room_get_state_event(room, "m.room.encryption"), "room state", self.config, missing_ok=True
        )
        if state is None or encryption_available():
            return None
        return ENCRYPTED.format(room=room)

    # --- sending ---------------------------------------------------------------------------------

    async def _send(self, content: dict[str, Any], what: str) -> str:
        client = self._nio()
        sent = await call(client.room_send(self.config.room_id, "m.room.message", content), what, self.config)
        return str(sent.event_id)

    async def deliver(self, request: Request) -> Delivery:
        if request.kind != Kind.NOTIFICATION and not self.config.answerers:
            raise DeliveryError("not sent: nobody may answer: allowed_users is empty", permanent=True)
        problem = await self._encrypted(self._nio())
        if problem:
            raise DeliveryError(f"not sent: {problem}", permanent=True)
        event_id = await self._send(message(request, self.public_url, preview=shown(self, request)), "send")
        return Delivery(ref=event_id, detail={"event_id": event_id})

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """A notice in the request's thread, not a second copy."""
        if not delivery.ref:
            return await super().remind(request, delivery, key)
        return Delivery(
            detail={"event_id": await self._send(in_thread(delivery.ref, reminder(request)), "remind")}
        )

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Edit the message to the request and its outcome."""
        if request.kind == Kind.NOTIFICATION or not delivery.ref:
            return
        line = outcome_line(request, self.name)
        new = message(request, self.public_url, outcome=line, preview=shown(self, request))
        await self._send(edit(delivery.ref, new), "edit")

    # --- answers over /sync ----------------------------------------------------------------------

    async def _sync_forever(self) -> None:
        """``/sync`` in a loop; its ``next_batch`` is kept in ``self.state``, so a restart neither
        loses an answer nor takes one twice."""
        client = self._nio()
        since = await self.state.get("next_batch")
        room = self.config.room_id
        timeline = {"types": ["m.room.message", "m.reaction"], "limit": 50}
        sync_filter = {"room": {"rooms": [room], "timeline": timeline}, "presence": {"types": []}}
        attempt = 0
        while True:
            try:
                response = await call(
                    client.sync(
                        timeout=int(self.config.sync_timeout * 1000), since=since, sync_filter=sync_filter
                    ),
                    "sync",
                    self.config,
                    seconds=self.config.sync_timeout + HTTP_TIMEOUT,  # the long poll, and the call itself
                )
            except asyncio.CancelledError:
                raise
            except DeliveryError as exc:
                attempt += 1
                (log.error if exc.permanent else log.warning)(
                    "matrix %s: %s; syncing again in %.0fs", self.name, exc, SYNC_RETRY.delay(attempt)
                )
                await asyncio.sleep(SYNC_RETRY.delay(attempt))
                continue
            attempt = 0
            joined = response.rooms.join.get(room)
            for event in joined.timeline.events if joined else []:
                try:
                    await self._on_event(event.source)
                except Exception:
                    log.exception(
                        "matrix %s: could not handle event %s", self.name, event.source.get("event_id")
                    )
            since = response.next_batch
            await self.state.set("next_batch", since)

    async def _on_event(self, event: dict[str, Any]) -> None:
        sender = str(event.get("sender") or "")
        if sender == self.config.user_id or not event.get("event_id"):
            return
        content = event.get("content") or {}
        relates = content.get("m.relates_to") or {}
        if event.get("type") == "m.reaction" and relates.get("rel_type") == "m.annotation":
            target, text, reaction = relates.get("event_id"), str(relates.get("key") or ""), True
        elif event.get("type") == "m.room.message" and "m.new_content" not in content:
            replied = (relates.get("m.in_reply_to") or {}).get("event_id")
            target = relates.get("event_id") if relates.get("rel_type") == "m.thread" else replied
            text, reaction = _without_fallback(str(content.get("body") or "")), False
        else:
            return
        request = await self.find_by_ref(str(target)) if target else None
        if request is None or request.kind == Kind.NOTIFICATION:
            return
        fields = _fields(request, text, reaction)
        if fields is None and reaction:
            return  # 👀 and the like: a reaction that answers nothing
        if await self.state.seen(f"event:{event['event_id']}"):
            return
        if not allowed(sender, self.config.answerers):
            reason = "not in allowed_users" if self.config.answerers else "allowed_users is not set"
            await self.ignore(request.id, sender, reason)
            return
        if fields is None:
            await self.ignore(request.id, sender, "a reply that is not yes or no")
            await self._say(str(target), "Not recorded: react ✅ or ❌, or reply “yes” or “no”.")
            return
        if fields.get("decision") == "approve" and request.risk == "high" and request.is_open:
            await self.ignore(request.id, sender, "a high-risk approval outside the inbox")
            await self._say(str(target), HIGH_RISK)
            return
        outcome = await self.answer(
            request.id, Reply(channel=self.name, responder=sender, identity=sender, **fields)
        )
        if not isinstance(outcome, Answered) or isinstance(outcome, Counted):  # the edit shows the rest
            await self._say(str(target), outcome.words)

    async def _say(self, root: str, text: str) -> None:
        """A notice in the thread of the request's message (best effort)."""
        try:
            await self._send(in_thread(root, text), "reply")
        except DeliveryError as exc:
            log.warning("matrix %s: %s", self.name, exc)


def _fields(request: Request, text: str, reaction: bool) -> dict[str, Any] | None:
    if request.kind == Kind.APPROVAL:
        decision = (
            decision_of_key(text) if reaction else decision_of(text.split()[0]) if text.split() else None
        )
        return {"decision": decision} if decision else None
    if reaction:
        number = number_of_key(text)
        choice = choice_by_number(str(number), request.choices) if number else None
        return {"choice": choice} if choice else None
    choice = choice_by_number(text, request.choices)
    return {"choice": choice} if choice is not None else {"text": text}


def _without_fallback(body: str) -> str:
    """A reply's own words: the quoted lines of the message it replies to taken off."""
    lines = body.splitlines()
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).strip()
