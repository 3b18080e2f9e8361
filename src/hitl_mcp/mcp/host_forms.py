"""The host's own window: the elicitation channel driven from inside the tool call that waits.

Two ways to reach the person in the host, chosen per call from what the client declares and the
channel's ``mode`` (``auto``: a form when the client shows forms, else a link when it opens URLs):

- **form**: the request as a form (``channels/elicitation.py`` renders it); the answer is the reply;
- **url**: a signed, single-use, expiring link to the request's inbox page (``web/links.py``); the
  host asks the person to open it, they sign in to the inbox if they are not already (the link is
  not a credential), answer on that page, and once the request settles the client is told
  (``notifications/elicitation/complete``). Once the host says the person opened it, later calls
  do not offer it again.

Per protocol era:

- handshake era (stdio, SSE, stateful HTTP): an ``elicitation/create`` request races the other
  channels while the call waits; the first valid answer wins, and a form still open when another
  channel wins (or the budget runs out) is cancelled;
- 2026-07-28: the call returns an ``InputRequiredResult`` carrying the form or link; the client
  retries with the answer, which is settled, and the retry then waits like any call. The round-trip
  state is sealed by the SDK under a key kept in the state directory, so a retry survives a restart.

A declined or dismissed form or link means this person did not answer here: it is audited and not
offered again for that request, and the request stays open on its other channels. When the host's
window was its only channel, the request is cancelled with the reason "declined in the host's form"
(an approval so settled is not approved).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from mcp.server.mcpserver import Context
from mcp.types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
)

from hitl_mcp.channels import elicitation
from hitl_mcp.core.errors import ReplyInvalid
from hitl_mcp.core.models import Request
from hitl_mcp.mcp.call_context import (
    AnyContext,
    FormState,
    Mode,
    asked_here,
    client_name,
    form_state,
    is_modern,
    responder,
    session_key,
)
from hitl_mcp.mcp.host_window import Linking, link_message, render_form

if TYPE_CHECKING:  # the broker loads after a stdio start is served (serving.SIDE_MODULES)
    from hitl_mcp.broker import Broker

log = logging.getLogger("hitl_mcp.mcp.server")

#: the key of our form in an ``InputRequiredResult``
FORM_KEY = "hitl-mcp:form"
#: how often the form is shown again after an answer that does not fit, within one call
FORM_ATTEMPTS = 3

Tick = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class Offer:
    """Whether this call offers the request in the host's window: through ``channel`` in ``mode``,
    or not, and if the host cannot show it at all, why (``skipped``)."""

    channel: str | None = None
    mode: Mode = "form"
    skipped: str | None = None


@dataclass(frozen=True)
class Waiting:
    """How a call's wait ended: the request as it then stands, how long the call waited, and who
    could not be reached (empty unless nobody could)."""

    request: Request
    seconds: float
    undelivered: list[dict[str, str]]


class HostForms:
    """Drives the elicitation channel from inside tool calls."""

    MAX_TOLD = 10_000

    def __init__(self, heartbeat_seconds: float, linking: Linking | None = None) -> None:
        self.heartbeat_seconds = heartbeat_seconds
        self.linking = linking
        self.open: set[str] = set()
        """Requests with a form or link open in this process: one at a time per request."""
        self.told: set[str] = set()
        """Sessions whose host cannot show the window, already logged."""

    @staticmethod
    def channel_of(broker: Broker, request: Request) -> str | None:
        """The request's elicitation channel, if it has one."""
        for name in request.channels:
            channel = broker.channels.get(name)
            if channel is not None and channel.type == elicitation.Channel.type:
                return name
        return None

    @staticmethod
    def only_form(broker: Broker, request: Request) -> bool:
        """Whether the host's window is the request's only channel."""
        return all(
            getattr(broker.channels.get(name), "type", None) == elicitation.Channel.type
            for name in request.channels
        )

    def choose(self, ctx: AnyContext, wanted: str) -> tuple[Mode | None, str | None]:
        """How this call can reach the person in the host (``wanted``: the channel's mode), or why not.
        ``ctx``: a tool call's, or a ``tasks/get``'s (``tasks/``); each carries its request's capabilities."""
        caps = ctx.session.client_capabilities
        declared = caps.elicitation if caps is not None else None
        # a bare `elicitation: {}` (before modes existed) means forms
        form = declared is not None and (declared.form is not None or declared.url is None)
        url = declared is not None and declared.url is not None
        mode: Mode | None = None
        if form and wanted in ("auto", "form"):
            mode = "form"
        elif url and wanted in ("auto", "url"):
            if self.linking is None:
                return None, "the host opens links but the inbox has no address to link to"
            mode = "url"
        if mode is None:
            what = {"form": "forms", "url": "links (URL elicitation)"}.get(wanted, "forms or links")
            return None, f"the MCP client does not support {what} (no elicitation capability)"
        if not is_modern(ctx) and not ctx.session.can_send_request:
            return None, "this connection cannot carry a form (stateless or JSON-response HTTP)"
        return mode, None

    def unshowable(self, ctx: Context, broker: Broker, names: list[str]) -> dict[str, str]:
        """The elicitation channels among ``names`` this call's client cannot show, with why."""
        skipped: dict[str, str] = {}
        for name in names:
            channel = broker.channels.get(name)
            if channel is None or channel.type != elicitation.Channel.type:
                continue
            mode, reason = self.choose(ctx, getattr(channel.config, "mode", "auto"))
            if mode is None:
                self._tell(ctx, reason or "")
                skipped[name] = f"skipped: {reason}"
        return skipped

    async def offer(self, ctx: Context, broker: Broker, request: Request, budget: float) -> Offer:
        channel = self.channel_of(broker, request)
        if channel is None or not request.is_open:
            return Offer()
        wanted = getattr(broker.channels[channel].config, "mode", "auto")
        mode, reason = self.choose(ctx, wanted)
        if mode is None:
            self._tell(ctx, reason or "")
            return Offer(skipped=f"not offered: {reason}")
        if budget <= 0 or request.id in self.open:
            return Offer()
        if not asked_here(ctx, request):
            return Offer()  # the form counts only where the request was asked, whoever this claims to be
        if await broker.state_get(channel, declined_key(request.id)) is not None:
            return Offer()  # this person already said no here
        if mode == "url" and await broker.state_get(channel, linked_key(request.id)) is not None:
            return Offer()  # they have the link already: no second prompt while they answer there
        return Offer(channel=channel, mode=mode)

    def _tell(self, ctx: Context, reason: str) -> None:
        # 2026-07-28 has no sessions: there, once per client (by name) per process
        key = f"client:{client_name(ctx)}" if is_modern(ctx) else session_key(ctx)
        if key in self.told:
            return
        if len(self.told) >= self.MAX_TOLD:
            self.told.clear()
        self.told.add(key)
        log.info("hitl-mcp: the host's form is skipped for %s: %s", client_name(ctx) or "this client", reason)

    async def wait(
        self, ctx: Context, broker: Broker, request: Request, budget: float, tick: Tick
    ) -> Waiting | InputRequiredResult:
        """The call's wait, up to ``budget`` seconds, with the host's window where it can show the
        request: raced against the other channels (handshake era), or returned as the form to fill in
        (2026-07-28), whose retry is settled here first. ``tick(elapsed)`` reports progress."""
        answered_here = False
        state = form_state(ctx)
        if state is not None and state.request_id == request.id:
            # 2026-07-28: the retry that carries the host form's answer
            answered_here = True
            note = await self.settle_input(ctx, broker, request, state)
            request = await broker.get_or_raise(request.id)
            if note is not None and request.is_open and state.attempt + 1 < FORM_ATTEMPTS:
                channel = self.channel_of(broker, request)
                if channel is not None:
                    again = Offer(channel=channel, mode=state.mode)
                    return await self.ask_in_result(ctx, broker, request, again, state.attempt + 1, note)
        offer = Offer() if answered_here else await self.offer(ctx, broker, request, budget)
        if offer.channel is not None and is_modern(ctx):
            return await self.ask_in_result(ctx, broker, request, offer, 0, None)
        undelivered: list[dict[str, str]] = []
        if offer.skipped is not None and self.only_form(broker, request):
            # nobody else has the request and this host cannot show it: waiting would be pointless
            budget = 0.0
            undelivered = [{"channel": name, "error": offer.skipped} for name in request.channels]
        started = anyio.current_time()
        try:
            if request.is_open and budget > 0:
                await tick(0.0)
            if offer.channel is not None:
                request = await self.race(ctx, broker, request, offer, budget, tick)
            else:
                request = await broker.wait(request.id, budget, tick, self.heartbeat_seconds)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await broker.caller_left(request.id, client_name(ctx), anyio.current_time() - started)
            raise
        if request.is_open and not undelivered:
            undelivered = await broker.undelivered(request.id)
        return Waiting(request, anyio.current_time() - started, undelivered)

    async def race(
        self, ctx: Context, broker: Broker, request: Request, offer: Offer, budget: float, tick: Tick
    ) -> Request:
        """Handshake era: the form or link and the other channels race for ``budget`` seconds."""
        if request.id in self.open or offer.channel is None:  # another call shows it already
            return await broker.wait(request.id, budget, tick, self.heartbeat_seconds)
        self.open.add(request.id)
        opened: list[str] = []  # the link's elicitation id while the host has it (not declined)
        show = self._show if offer.mode == "form" else self._show_link
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(show, ctx, broker, request, offer.channel, budget, opened)
                settled = await broker.wait(request.id, budget, tick, self.heartbeat_seconds)
                tg.cancel_scope.cancel()  # another channel won, or the budget ran out: close the form
        finally:
            self.open.discard(request.id)
        if opened and not settled.is_open:
            try:  # the host may now drop its "waiting for the browser" state
                await ctx.session.send_elicit_complete(opened[0], related_request_id=ctx.request_id)
            except Exception as exc:  # the client left: nothing to tell
                log.debug("hitl-mcp: elicitation/complete not sent: %s", exc)
        return settled

    async def _show(
        self, ctx: Context, broker: Broker, request: Request, channel: str, budget: float, _: list[str]
    ) -> None:
        """Show the form until it is answered, declined or withdrawn; a failure here never fails the
        call: the other channels go on."""
        who = responder(ctx)
        form = render_form(broker, request, channel)
        note: str | None = None
        try:
            with anyio.move_on_after(budget):  # never longer than the call may wait
                for _attempt in range(FORM_ATTEMPTS):
                    await broker.record(request.id, "form_offered", who, {"channel": channel})
                    message = form.message if note is None else f"{note}\n\n{form.message}"
                    answer = await ctx.session.elicit_form(
                        message, form.schema, related_request_id=ctx.request_id
                    )
                    note = await self.settle(broker, request, channel, answer, who)
                    if note is None:
                        return
        except Exception as exc:  # the client refused the form or sent something malformed
            await self._failed(broker, request, channel, who, "form", exc)

    async def _show_link(
        self, ctx: Context, broker: Broker, request: Request, channel: str, budget: float, opened: list[str]
    ) -> None:
        """Offer the link; an accepted link means the person went to the page, where they answer."""
        assert self.linking is not None
        who = responder(ctx)
        elicitation_id = secrets.token_hex(8)
        try:
            with anyio.move_on_after(budget):
                await broker.record(request.id, "link_offered", who, {"channel": channel})
                opened.append(elicitation_id)
                answer = await ctx.session.elicit_url(
                    link_message(request, channel),
                    self.linking.url(request, channel, who),
                    elicitation_id,
                    related_request_id=ctx.request_id,
                )
                if answer.action != "accept":
                    opened.clear()
                await self.settle(broker, request, channel, answer, who, "url")
        except Exception as exc:
            opened.clear()  # the client refused it: nothing to complete
            await self._failed(broker, request, channel, who, "link", exc)

    @staticmethod
    async def _failed(
        broker: Broker, request: Request, channel: str, who: str, what: str, exc: Exception
    ) -> None:
        log.info("hitl-mcp: the host's %s failed for request %s: %s", what, request.id, exc)
        with anyio.CancelScope(shield=True):
            await broker.record(request.id, f"{what}_failed", who, {"channel": channel, "error": str(exc)})

    async def settle(
        self,
        broker: Broker,
        request: Request,
        channel: str,
        answer: ElicitResult,
        who: str,
        mode: Mode = "form",
    ) -> str | None:
        """Apply the host's answer. Returns a note to show the form again with, or None when done."""
        if answer.action == "accept" and mode == "url":
            # the person went to the page: the answer, if any, comes from there
            await broker.record(request.id, "link_accepted", who, {"channel": channel})
            await broker.state_set(channel, linked_key(request.id), "accepted")
            return None
        if answer.action == "accept":
            reply = elicitation.reply_from(request, answer.content, channel, who)
            may = not request.step_up and broker.channels[channel].may_approve(request.risk)
            if reply.decision != "deny" and not may:
                # a deny-only form: whatever else came back approves nothing
                await broker.record(request.id, "form_approval_refused", who, {"channel": channel})
                return None
            try:
                await broker.resolve(request.id, reply)  # a late answer is recorded as losing
            except ReplyInvalid as exc:
                await broker.record(request.id, "form_invalid", who, {"channel": channel, "error": str(exc)})
                return f"That answer does not fit: {exc}."
            return None
        declined = answer.action == "decline"
        what = "form" if mode == "form" else "link"
        await broker.record(
            request.id, f"{what}_declined" if declined else f"{what}_dismissed", who, {"channel": channel}
        )
        await broker.state_set(channel, declined_key(request.id), answer.action)
        current = await broker.get_or_raise(request.id)
        if current.is_open and self.only_form(broker, current):
            reason = (
                "declined in the host's form" if declined else "dismissed the host's form without answering"
            )
            await broker.cancel(request.id, reason, who)
        return None

    async def ask_in_result(
        self, ctx: Context, broker: Broker, request: Request, offer: Offer, attempt: int, note: str | None
    ) -> InputRequiredResult:
        """2026-07-28: the form or link travels in the result; the client retries with the answer."""
        assert offer.channel is not None
        channel, who = offer.channel, responder(ctx)
        params: ElicitRequestFormParams | ElicitRequestURLParams
        if offer.mode == "url":
            assert self.linking is not None
            await broker.record(request.id, "link_offered", who, {"channel": channel})
            params = ElicitRequestURLParams(
                message=link_message(request, channel),
                url=self.linking.url(request, channel, who),
                elicitation_id=secrets.token_hex(8),
            )
        else:
            await broker.record(request.id, "form_offered", who, {"channel": channel})
            form = render_form(broker, request, channel)
            message = form.message if note is None else f"{note}\n\n{form.message}"
            params = ElicitRequestFormParams(message=message, requested_schema=form.schema)
        return InputRequiredResult(
            input_requests={FORM_KEY: ElicitRequest(params=params)},
            request_state=json.dumps({"v": 1, "r": request.id, "a": attempt, "m": offer.mode}),
        )

    async def settle_input(
        self, ctx: Context, broker: Broker, request: Request, state: FormState
    ) -> str | None:
        """2026-07-28: apply the answer a retry carries; see ``settle``."""
        channel = self.channel_of(broker, request)
        answer = (ctx.input_responses or {}).get(FORM_KEY)
        if channel is None or not isinstance(answer, ElicitResult):
            return None  # retried without an answer: this person did not answer here
        return await self.settle(broker, request, channel, answer, responder(ctx), state.mode)


def declined_key(request_id: str) -> str:
    return f"declined:{request_id}"


def linked_key(request_id: str) -> str:
    return f"linked:{request_id}"
