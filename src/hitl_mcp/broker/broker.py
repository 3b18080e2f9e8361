"""The broker: ask, wait, resolve, cancel, expire. The heart, with no I/O of its own.

A request is a row; a waiting coroutine is only a view on it. Within one process a resolution
wakes its waiters at once; one written by another process sharing the database is seen by the change
feed (``store.changed()``: a PostgreSQL notification, a 0.5 s poll on SQLite) or the next heartbeat.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from hitl_mcp.broker.digests import held_until
from hitl_mcp.broker.feed import Listener, Listeners
from hitl_mcp.broker.outbox import Outbox, silent_channels
from hitl_mcp.broker.previews import refuse_unseen, with_preview
from hitl_mcp.broker.reports import BrokerReports
from hitl_mcp.broker.routing import BrokerRouting
from hitl_mcp.broker.rules import BrokerRules
from hitl_mcp.broker.views import BrokerViews
from hitl_mcp.channels.base import Channel
from hitl_mcp.core.asks import AskDefaults, AskSpec
from hitl_mcp.core.errors import BrokerError, NotFound, ReplyInvalid, UnknownChannel
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import (
    Kind,
    NotifyResult,
    Reply,
    Request,
    Settled,
    Status,
    canonical_json,
    iso,
    now,
    payload_sha256,
)
from hitl_mcp.core.outcomes import check_reply, expiry_outcome
from hitl_mcp.core.previews import preview_sha256
from hitl_mcp.core.store import Cursor, Engine, History, KeyConflict, Store, advanced
from hitl_mcp.core.wording import already
from hitl_mcp.kit.loops import forever, reason

__all__ = [
    "AskDefaults",
    "AskSpec",
    "Broker",
    "BrokerError",
    "NotFound",
    "ReplyInvalid",
    "UnknownChannel",
    "check_reply",
    "expiry_outcome",
]

log = logging.getLogger("hitl_mcp.broker")

MAINTAIN_SECONDS = 2.0
WAKING_EVENTS = ("answered", "expired", "cancelled", "delivery_failed")
NOTIFY_TIMEOUT = 15.0
#: channel state about a settled request, and inbound ids, are kept this long (past any provider's
#: redelivery window), then pruned once every PRUNE_EVERY seconds
KEEP_STATE_SECONDS = 30 * 86400.0
PRUNE_EVERY = 3600.0
#: a waiter whose request is due but could not be expired looks again this soon
EXPIRY_RETRY_SECONDS = 1.0
#: the expiry sweep looks at least this often: a request created by another process wakes no one here
SWEEP_SECONDS = 30.0

OnTick = Callable[[float], Awaitable[None]]


class Broker(BrokerRouting, BrokerRules, BrokerViews, BrokerReports):
    def __init__(
        self,
        store: Engine,
        channels: Mapping[str, Channel],
        defaults: AskDefaults,
        *,
        state_dir: Path,
        public_url: str | None = None,
        policy: Policy | None = None,
    ) -> None:
        self.store: Store = store
        self.history: History = store
        """The read side (listings, trails, the audit log) for the CLI and the inbox."""
        self.channels = dict(channels)
        self.defaults = defaults
        self.state_dir = state_dir
        self.public_url = public_url
        self.policy = policy or Policy(types={name: "" for name in channels})
        """People and escalation ladders (``escalation.Policy``)."""
        self.outbox = Outbox(store, self.channels)
        self._waiters: dict[str, set[anyio.Event]] = {}
        self._just_settled: dict[str, Request] = {}  # handed to this process's waiters: no re-read
        self._expiry_wake = anyio.Event()
        self._waiters_present = anyio.Event()
        self._listeners = Listeners()
        self._cursor: Cursor = {}  # the change feed's: each audit chain's last seq read
        self._pruned_at = 0.0

    # --- background work -------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The outbox, expiry and change feed; runs until cancelled. Each loop survives a failed
        round (``loops.forever``): a locked or failing store delays the work, never ends it."""
        self._cursor = await self.store.last_seq()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.outbox.run)
            tg.start_soon(forever, "the expiry sweep", self._expire_round)
            tg.start_soon(forever, "the change feed", self._watch_round)
            tg.start_soon(forever, "the WAL checkpoint", self._maintain_round)
            task_status.started()

    async def _expire_round(self) -> None:
        # while paused, deadlines wait (resume pushes them back): look again at the next sweep
        upcoming = None
        if await self.paused() is None:
            for request_id in await self.store.due_expiries(now()):
                await self.expire(request_id)
            upcoming = await self.store.next_expiry()
        delay = SWEEP_SECONDS if upcoming is None else min(max(upcoming - now(), 0.05), SWEEP_SECONDS)
        with anyio.move_on_after(delay):
            await self._expiry_wake.wait()
        self._expiry_wake = anyio.Event()

    async def _maintain_round(self) -> None:
        await anyio.sleep(MAINTAIN_SECONDS)
        await self.store.maintain()
        if now() - self._pruned_at >= PRUNE_EVERY:
            self._pruned_at = now()
            await self.store.prune(self._pruned_at - KEEP_STATE_SECONDS)

    async def _watch_round(self) -> None:
        """Wake waiters (and listeners) for changes written by any process."""
        if not self._waiters and not self._listeners:
            self._waiters_present = anyio.Event()
            await self._waiters_present.wait()
        changes = await self.store.changes_since(self._cursor)
        self._cursor = advanced(self._cursor, changes)
        for change in changes:
            if change.request_id is not None:
                self._publish(change.request_id, change.event)
            else:  # pause, resume (every deadline moves), rules, credentials
                self._listeners.heard(None, change.event)
        if len(changes) < 1000:
            await self.store.changed()

    def _publish(self, request_id: str, event: str) -> None:
        if event in WAKING_EVENTS:
            for waiter in self._waiters.get(request_id, ()):
                waiter.set()
        self._listeners.heard(request_id, event)

    def listen(self, listener: Listener, *, unattached: bool = False) -> Callable[[], None]:
        """``listener(request_id, event)`` for every audit event, by any process (``feed.py``)."""
        self._waiters_present.set()
        return self._listeners.add(listener, unattached=unattached)

    # --- asking ----------------------------------------------------------------------------

    async def ask(self, spec: AskSpec) -> tuple[Request, bool]:
        """Store the request, queue its deliveries and schedule its escalation steps, or re-attach to
        the one it repeats. An approval with a quorum is sent to its people (``of``) too. A new approval
        meets the gate first (``broker_rules``): while paused it is denied at once, and one a remembered
        rule covers is approved by the rule, with no one asked (never one that needs a quorum)."""
        policy = await self.policy_now()
        spec, preview, reasons = with_preview(spec)  # routes, quorum and rules see the risk raised
        quorum = policy.quorum(spec.kind, spec.risk, spec.approvals, spec.to)
        if quorum is not None:  # the approvers are asked, with whoever else the call names
            spec = replace(spec, to=list(dict.fromkeys([*(spec.to or []), *quorum.of])))
        channels, ladder = self.route(spec, policy)
        gate = await self.gate(spec, rules=quorum is None)
        created_at = now()
        timeout = spec.timeout_seconds or self.defaults.timeouts.get(spec.kind)
        steps = [] if ladder is None else policy.plan(ladder, created_at, timeout)
        if not spec.forms:  # the gate: a step never adds the host's form either
            forms = {n for n, ch in self.channels.items() if ch.is_form}
            steps = [replace(s, channels=[c for c in s.channels if c not in forms]) for s in steps]
            steps = [s for s in steps if s.channels or s.action != "notify"]
        if gate is not None:
            channels, steps = [], []  # settled below, before anyone is sent it
        if ladder is not None and ladder.on_timeout == "keep_pending":
            timeout = None  # never expires; the window only placed the `at` steps
        allow_free_text = spec.allow_free_text if spec.allow_free_text is not None else not spec.choices
        request = Request(
            id=secrets.token_hex(8),
            kind=spec.kind,
            status=Status.NOTIFIED if spec.kind == Kind.NOTIFICATION else Status.PENDING,
            text=spec.text,
            title=spec.title,
            details=spec.details,
            context=spec.context,
            choices=spec.choices or None,
            allow_free_text=allow_free_text,
            payload=spec.payload,
            payload_sha256=payload_sha256(spec.payload) if spec.kind == Kind.APPROVAL else None,
            preview=preview,
            preview_sha256=preview_sha256(preview),
            risk=spec.risk,
            risk_reasons=reasons,
            level=spec.level,
            default_answer=spec.default_answer,
            channels=channels,
            to=policy.asked(spec.kind, spec.risk, spec.channels, spec.to),
            approvals=quorum,
            step_up=policy.needs_step_up(spec.kind, spec.risk),
            idempotency_key=spec.idempotency_key,
            session_key=spec.session_key,
            client_name=spec.client_name,
            owner=spec.owner,
            created_at=created_at,
            expires_at=created_at + timeout if timeout and spec.kind != Kind.NOTIFICATION else None,
        )
        held = held_until(request, self.channels)  # info notifications on a digest's channels
        try:
            stored, created = await self.store.create(request, self._dedupe_key(request), steps, held)
        except KeyConflict:
            # no outcome and no id: the key's request may hold someone's answer to something else
            raise BrokerError(
                "idempotency_key already used for a different request; use a new key for a new request"
            ) from None
        if gate is not None:
            return await self.gated(stored, created, gate), created
        if created:
            # whoever is away: the request went to their delegate, and the trail says so
            for person, stand_in in policy.delegated(
                [*(request.to or []), *(quorum.of if quorum else [])]
            ).items():
                await self.store.record(request.id, "delegated", None, {"person": person, "to": stand_in})
            self.outbox.kick()
            self._expiry_wake.set()
        return stored, created

    @staticmethod
    def _dedupe_key(request: Request) -> str | None:
        """Without a key, the same ask (``Request.fingerprint``) from the same session while it is
        pending is the same request."""
        if request.idempotency_key is not None or request.session_key is None:
            return None
        if request.kind == Kind.NOTIFICATION:
            return None
        material = canonical_json([request.owner, request.session_key, request.fingerprint])
        return hashlib.sha256(material.encode()).hexdigest()

    async def notify(self, spec: AskSpec) -> NotifyResult:
        """Deliver a notification to its channels, one attempt each (on a channel with a digest, an
        info notification is queued for it instead); never waits for a person."""
        request, _ = await self.ask(spec)
        rows = await self.store.deliveries(request.id)
        with anyio.move_on_after(NOTIFY_TIMEOUT):
            await self.outbox.send_now([r.id for r in rows if r.status == "held"])
        held = held_until(request, self.channels)
        delivered: list[str] = []
        failed: list[dict[str, str]] = []
        digest: list[dict[str, str]] = []
        for row in await self.store.deliveries(request.id):
            if row.status == "sent":
                delivered.append(row.channel)
            elif row.channel in held and row.status in ("queued", "sending"):  # sending: its window closed
                digest.append({"channel": row.channel, "at": iso(held[row.channel]) or ""})
            else:
                failed.append({"channel": row.channel, "error": row.error or f"not delivered ({row.status})"})
        return NotifyResult(request_id=request.id, delivered=delivered, failed=failed, digest=digest)

    # --- waiting ---------------------------------------------------------------------------

    async def wait(
        self, request_id: str, seconds: float, on_tick: OnTick | None = None, tick_seconds: float = 10.0
    ) -> Request:
        """Wait up to ``seconds`` for the request to settle; returns it as it then stands."""
        started = anyio.current_time()
        event = anyio.Event()
        self._waiters.setdefault(request_id, set()).add(event)
        self._waiters_present.set()
        try:
            request = await self.get_or_raise(request_id)
            while request.status == Status.PENDING:
                elapsed = anyio.current_time() - started
                remaining = seconds - elapsed
                until_expiry = None if request.expires_at is None else request.expires_at - now()
                if until_expiry is not None and until_expiry <= 0:
                    try:
                        request = await self.expire(request_id)
                        if request.status != Status.PENDING:
                            return request
                        until_expiry = EXPIRY_RETRY_SECONDS  # paused: look again in a while
                    except Exception as exc:  # the store is busy or failing: the sweep retries it
                        log.warning(
                            "hitl-mcp: expiring %s failed (%s); still waiting", request_id, reason(exc)
                        )
                        until_expiry = EXPIRY_RETRY_SECONDS
                if remaining <= 0:
                    break
                step = min(remaining, tick_seconds)
                if until_expiry is not None:
                    step = min(step, until_expiry)
                with anyio.move_on_after(step):
                    await event.wait()
                request = self._just_settled.get(request_id) or await self.get_or_raise(request_id)
                if request.status != Status.PENDING:
                    break
                if event.is_set():  # a delivery failed: stop waiting if nobody can be reached
                    if await self.undelivered(request_id):
                        break
                    self._waiters[request_id].discard(event)
                    event = anyio.Event()
                    self._waiters[request_id].add(event)
                elif on_tick is not None:
                    await on_tick(anyio.current_time() - started)
            return request
        finally:
            waiters = self._waiters.get(request_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[request_id]
                    self._just_settled.pop(request_id, None)

    # --- settling --------------------------------------------------------------------------

    async def resolve(self, request_id: str, reply: Reply) -> Settled:
        """First valid reply wins; later ones are recorded as losing. Raises on a reply that does
        not fit the request (``ReplyInvalid``) or an unknown id (``NotFound``)."""
        request = await self.get_or_raise(request_id)
        outcome = check_reply(request, reply) if request.status == Status.PENDING else {}
        refuse_unseen(self.channels, request, reply)  # approved only where the preview was shown whole
        # credited to the verified identity's person (never the display text; the responder stays the
        # actor); an approval or a quorum's vote counts only for the payload and preview hashes shown
        policy = await self.policy_now()
        person = policy.person_of(reply.channel, reply.identity)
        credit = {"person": person, "on_behalf_of": policy.on_behalf_of(person, request)}
        shown = {"payload_sha256": request.payload_sha256, "preview_sha256": request.preview_sha256}
        reply = reply.model_copy(update={**credit, **shown})
        settled = await self.store.resolve(
            request_id, reply, outcome, await self._expiry(request), silent_channels(self.channels)
        )
        if settled is None:
            raise NotFound(f"no request with id {request_id!r}")
        if settled.won or settled.request.status != request.status:
            self._settled(settled.request)
        elif settled.counted:
            self._publish(request_id, "voted")
        if settled.won and reply.remember and settled.request.approvals is None:
            await self.remember(settled.request, reply)
        reason = settled.reason or ("" if settled.won else already(settled.request))
        return Settled(settled.won, settled.request, reason, settled.counted)

    async def cancel(self, request_id: str, reason: str | None, actor: str) -> Request:
        request = await self.get_or_raise(request_id)
        outcome: dict[str, Any] = {"comment": reason}
        if request.kind == Kind.APPROVAL:
            outcome["approved"] = False
        expired, silent = await self._expiry(request), silent_channels(self.channels)
        settled = await self.store.close_request(
            request_id, Status.CANCELLED, actor, outcome, expired, silent
        )
        assert settled is not None
        if settled.won or settled.request.status != request.status:
            self._settled(settled.request)
        return settled.request

    async def _expiry(self, request: Request) -> dict[str, Any] | None:
        """What a due request expires with, when a reply or a cancel finds it past its deadline; None
        while approvals are paused: deadlines wait then (resume pushes them), so the reply counts."""
        if request.expires_at is not None and request.expires_at <= now() and await self.paused() is not None:
            return None
        return expiry_outcome(request)

    async def expire(self, request_id: str) -> Request:
        """Expire a due request; while approvals are paused, deadlines wait and it stays pending."""
        request = await self.get_or_raise(request_id)
        if request.status != Status.PENDING or await self.paused() is not None:
            return request
        outcome = expiry_outcome(request)
        settled = await self.store.close_request(
            request_id, Status.EXPIRED, "expiry", outcome, outcome, silent_channels(self.channels)
        )
        assert settled is not None
        if settled.won:
            self._settled(settled.request)
        return settled.request

    async def caller_left(self, request_id: str, client_name: str | None, waited: float) -> None:
        """The host cancelled the call or went away; the request stays answerable."""
        await self.store.record(request_id, "caller_left", client_name, {"waited_seconds": round(waited, 3)})

    def _settled(self, request: Request) -> None:
        if request.id in self._waiters:
            self._just_settled[request.id] = request
        self._publish(request.id, request.status.value)
        silent = silent_channels(self.channels)
        if any(name not in silent for name in request.channels):
            self.outbox.kick()  # a retraction may be queued
