"""SMS through Twilio: the channel (sending once, reply codes); inbound texts and opt-outs are in
``inbound.py``."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from hitl_mcp.channels.base import ChannelConfig, Delivery, DeliveryError, Hub
from hitl_mcp.channels.fitting import Room, approve_here, shown
from hitl_mcp.channels.twilio_sms.config import RECENT_CODES, REPLY_RETRY, TWILIO_API, Config, log
from hitl_mcp.channels.twilio_sms.inbound import SmsInbound
from hitl_mcp.channels.twilio_sms.text import ROOM, _retract_text, compose, segments
from hitl_mcp.channels.twilio_sms.transport import _Failure, _failure, _transport_class
from hitl_mcp.core.models import Kind, Request
from hitl_mcp.core.wording import still_waiting

if TYPE_CHECKING:
    from twilio.rest import Client

# ------------------------------------------------------------------------------------------ channel


@dataclass
class _Sent:
    """How one batch of sends went, per number."""

    sids: dict[str, str]
    failed: dict[str, str]
    #: a failure that left the text unsent (a 429, no connection): worth another attempt
    retry: _Failure | None = None


class TwilioSmsChannel(SmsInbound):
    type = "twilio_sms"
    webhook_alias: ClassVar[str | None] = "twilio"
    extra: ClassVar[str | None] = "sms"
    #: seconds one API call may take; after a send times out its outcome is unknown
    http_timeout: float = 10.0

    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        assert isinstance(config, Config)
        self._client: Client | None = None
        self._code_lock = anyio.Lock()
        #: where a new code comes from; the allocator skips codes in use
        self.next_code: Callable[[], str] = lambda: str(1000 + secrets.randbelow(9000))

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("twilio", "aiohttp")

    # --- life cycle -------------------------------------------------------------------------

    @property
    def polling(self) -> bool:
        mode = self.config.mode
        if mode == "auto":
            return not self.hub.public_url
        if mode == "webhook" and not self.hub.public_url:
            return True  # warned about in start()
        return mode == "poll"

    async def start(self) -> None:
        self._client = self._new_client()
        if self.config.mode == "webhook" and not self.hub.public_url:
            log.warning(
                "%s: mode 'webhook' needs server.public_url (the address Twilio can reach); polling instead",
                self.name,
            )
        if self.polling:
            self.in_background(self._poll_forever, exclusive=True)  # one poller among replicas

    async def close(self) -> None:
        await self.stop_background()
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.http_client.close()

    def _new_client(self) -> Client:
        from twilio.rest import Client

        sid = self.config.account_sid
        transport = _transport_class()(self.config.api_base_url, self.http_timeout)
        client = Client(sid, self.config.auth_token.get_secret_value(), sid, http_client=transport)
        if self.config.api_base_url != TWILIO_API:
            client.edge = client.region = None  # $TWILIO_EDGE would send it elsewhere
        return client

    @contextlib.asynccontextmanager
    async def _twilio(self) -> AsyncIterator[Client]:
        """The started channel's client, or one for this call only (``check``, ``test-channel``)."""
        if self._client is not None:
            yield self._client
            return
        client = self._new_client()
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.http_client.close()

    async def check(self) -> str:
        async with self._twilio() as client:
            try:
                account = await client.api.v2010.accounts(self.config.account_sid).fetch_async()
            except Exception as exc:
                raise DeliveryError(_failure(exc).message) from None
        if account.status not in (None, "active"):
            raise DeliveryError(f"the Twilio account is {account.status}")
        sender = self.config.from_ or self.config.messaging_service_sid
        return (
            f"ok: Twilio account {account.friendly_name or self.config.account_sid} ({account.status}); "
            f"texts from {sender} to {len(self.config.to)} number(s)"
        )

    # --- sending ----------------------------------------------------------------------------

    def preview_room(self) -> Room:
        return ROOM

    async def deliver(self, request: Request) -> Delivery:
        key = f"send:{request.id}"
        state = await self._load(key)
        code: str | None = None
        if request.kind != Kind.NOTIFICATION:
            code = state.get("code") or await self._allocate_code(request.id)
            state["code"] = code
            await self._save(key, state)
        public_url = self.public_url
        link = f"{public_url}/requests/{request.id}" if public_url else None
        body = compose(request, code, link, shown(self, request), approve_here(self, request) is None)
        size = segments(body)
        sent = await self._send_all(key, state, list(self.config.to), body)
        if sent.retry is not None:  # the numbers already reached are skipped next time
            raise DeliveryError(f"{sent.retry.message}; will retry", retry_after=sent.retry.retry_after)
        if not sent.sids:
            raise DeliveryError(
                "; ".join(f"{number} {why}" for number, why in sent.failed.items()), permanent=True
            )
        detail: dict[str, Any] = {
            "to": list(sent.sids),
            "sids": sent.sids,
            "segments": size.count,
            "encoding": size.encoding,
            "chars": len(body),
        }
        if code is not None:
            detail["code"] = code
        if sent.failed:
            detail["failed"] = sent.failed
        return Delivery(ref=next(iter(sent.sids.values())), detail=detail)

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """The request again, "Still waiting: ..." with its reply code, once per number (``deliver``
        never texts a number twice about one request, so the default would send nothing)."""
        code = delivery.detail.get("code")
        numbers = [
            n for n in (str(n) for n in delivery.detail.get("to") or []) if not await self._opted_out(n)
        ]
        if not code or not numbers:
            return Delivery()
        state_key = f"{key.partition(':')[0]}:{request.id}"  # remind#<step>:<id>: pruned with the request
        link = f"{self.public_url}/requests/{request.id}" if self.public_url else None
        body = compose(request.model_copy(update={"text": still_waiting(request.text)}), code, link)
        sent = await self._send_all(state_key, await self._load(state_key), numbers, body)
        if sent.retry is not None:
            raise DeliveryError(f"{sent.retry.message}; will retry", retry_after=sent.retry.retry_after)
        if sent.failed and not sent.sids:
            raise DeliveryError(
                "; ".join(f"{number} {why}" for number, why in sent.failed.items()), permanent=True
            )
        return Delivery(ref=next(iter(sent.sids.values()), None), detail={"sids": sent.sids})

    async def retract(self, request: Request, delivery: Delivery) -> None:
        if not self.config.notify_on_retract or request.kind == Kind.NOTIFICATION:
            return
        code = delivery.detail.get("code")
        numbers = [str(n) for n in delivery.detail.get("to") or []]
        if request.channel == self.name:  # whoever answered here already has the confirmation
            numbers = [n for n in numbers if n != request.responder]
        numbers = [n for n in numbers if not await self._opted_out(n)]
        if not code or not numbers:
            return
        key = f"retract:{request.id}"
        sent = await self._send_all(key, await self._load(key), numbers, _retract_text(request, code))
        if sent.retry is not None:
            raise DeliveryError(f"{sent.retry.message}; will retry", retry_after=sent.retry.retry_after)
        if sent.failed and not sent.sids:
            raise DeliveryError(
                "; ".join(f"{number} {why}" for number, why in sent.failed.items()), permanent=True
            )

    async def _send_all(self, key: str, state: dict[str, Any], numbers: list[str], body: str) -> _Sent:
        """Send ``body`` to each number at most once, ever: each number's progress is stored under
        ``key`` before and after its POST, so a repeated call (a 429 retry, a lease taken over after
        a crash) skips the numbers done and does not re-send one whose outcome is unknown."""
        progress: dict[str, dict[str, str]] = state.setdefault("numbers", {})
        result = _Sent({}, {})
        for number in numbers:
            entry = progress.get(number)
            if entry is not None and entry["state"] == "sent":
                result.sids[number] = entry["sid"]
                continue
            if entry is not None and entry["state"] == "sending":  # the process stopped mid-send
                entry = {"state": "unknown", "error": "outcome unknown: an earlier send was cut short"}
                progress[number] = entry
                await self._save(key, state)
            if entry is not None:
                result.failed[number] = entry["error"]
                continue
            if await self._opted_out(number):
                result.failed[number] = "opted out (STOP)"
                continue
            if result.retry is not None:
                continue  # the rest wait for the retry
            progress[number] = {"state": "sending"}
            await self._save(key, state)
            try:
                sid = await self._create(number, body)
            except Exception as exc:
                failure = _failure(exc)
                log.warning("%s: text to %s not sent: %s", self.name, number, failure.message)
                if failure.kind in ("rate", "unreachable"):  # never processed: safe to send again
                    del progress[number]
                    result.retry = failure
                else:
                    why = failure.message
                    if failure.kind == "unknown":
                        why = f"outcome unknown ({why}); not re-sent, to avoid a duplicate text"
                    progress[number] = {"state": failure.kind, "error": why}
                    result.failed[number] = why
                    if failure.code == 21610:
                        await self._set_opt_out(number, True, "twilio error 21610")
                await self._save(key, state)
                continue
            progress[number] = {"state": "sent", "sid": sid}
            result.sids[number] = sid
            await self._save(key, state)
        return result

    async def _create(self, number: str, body: str) -> str:
        kwargs: dict[str, Any] = {"to": number, "body": body}
        if self.config.from_:
            kwargs["from_"] = self.config.from_
        if self.config.messaging_service_sid:
            kwargs["messaging_service_sid"] = self.config.messaging_service_sid
        async with self._twilio() as client:
            message = await client.api.v2010.account.messages.create_async(**kwargs)
        return str(message.sid)

    async def _text(self, number: str, body: str) -> None:
        """A reply to someone who texted us (a confirmation, a help text): 429s are retried here,
        briefly; anything else is logged and dropped, never re-sent."""
        if await self._opted_out(number):
            return
        policy = REPLY_RETRY
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._create(number, body)
                return
            except Exception as exc:
                failure = _failure(exc)
                if failure.kind != "rate" or not policy.retries(attempt):
                    log.warning("%s: reply to %s not sent: %s", self.name, number, failure.message)
                    return
                wait = failure.retry_after if failure.retry_after is not None else policy.delay(attempt)
                await anyio.sleep(min(wait, policy.maximum_interval))

    # --- codes ------------------------------------------------------------------------------

    async def _allocate_code(self, request_id: str) -> str:
        """A code no pending request of this channel has, and not one of the last few handed out."""
        async with self._code_lock:
            taken = {str(d.detail.get("code")) for _, d in await self.open_requests()}
            recent: list[str] = json.loads(await self.state.get("recent_codes") or "[]")
            taken.update(recent)
            if len(taken) >= 9000:
                taken = {str(d.detail.get("code")) for _, d in await self.open_requests()}
            code = None
            for _ in range(64):
                candidate = self.next_code()
                if candidate not in taken:
                    code = candidate
                    break
            if code is None:
                free = [str(c) for c in range(1000, 10000) if str(c) not in taken]
                if not free:
                    raise DeliveryError("no free reply code: 9,000 requests are pending", permanent=True)
                code = secrets.choice(free)
            recent = [*recent, code][-RECENT_CODES:]
            await self.state.set("recent_codes", json.dumps(recent))
            await self.state.set(f"code:{code}", request_id)
            return code

    # --- stored state -----------------------------------------------------------------------

    async def _load(self, key: str) -> dict[str, Any]:
        loaded: dict[str, Any] = await self.state.load(key)
        return loaded

    async def _save(self, key: str, state: dict[str, Any]) -> None:
        await self.state.save(key, state)
