"""The host's own form inside a task: the request's elicitation channel, offered in a ``tasks/get``
answer as ``input_required`` (``inputRequests``) and answered by ``tasks/update``.

The form and the remote channels race as they do in a blocking call: the broker takes the first
valid answer, and a form answered after another channel won is recorded as losing. Each offer has
its own key (``form-1``, ``form-2``: a key is never reused once answered, as the spec requires); an
answer that does not fit is shown again with a note, at most ``FORM_ATTEMPTS`` times. A declined or
dismissed form is not offered again (and, when the form was the request's only channel, cancels
it), exactly as ``host_forms`` settles it.

What was offered is kept in the channel's state in the store, not in memory: a restarted server, or
another process sharing the store, shows the same key and the same link.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from mcp.types import ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult
from pydantic import ValidationError

from hitl_mcp.core.models import Request
from hitl_mcp.mcp.call_context import AnyContext, Mode, asked_here, responder
from hitl_mcp.mcp.host_forms import FORM_ATTEMPTS, HostForms, declined_key, linked_key
from hitl_mcp.mcp.host_window import link_message, render_form

__all__ = ["TaskForms"]

if TYPE_CHECKING:  # the broker loads after the start (cold start): only its type here
    from hitl_mcp.broker import Broker


METHOD = "elicitation/create"


@dataclass
class Offered:
    """The form a task shows now: its attempt number (the key), mode, note, and link if any."""

    attempt: int = 1
    mode: Mode = "form"
    note: str | None = None
    url: str | None = None
    shown: bool = False

    @property
    def key(self) -> str:
        return f"form-{self.attempt}"


def _state_key(request_id: str) -> str:
    return f"task-form:{request_id}"


class TaskForms:
    def __init__(self, forms: HostForms) -> None:
        self.forms = forms

    async def _load(self, broker: Broker, channel: str, request_id: str) -> Offered:
        raw = await broker.state_get(channel, _state_key(request_id))
        if raw is None:
            return Offered()
        try:
            return Offered(**json.loads(raw))
        except (ValueError, TypeError):
            return Offered()

    async def _save(self, broker: Broker, channel: str, request_id: str, offered: Offered) -> None:
        await broker.state_set(channel, _state_key(request_id), json.dumps(asdict(offered)))

    async def _offerable(self, ctx: AnyContext, broker: Broker, request: Request) -> tuple[str, Mode] | None:
        """The elicitation channel and mode to show the request in this host, if any."""
        channel = HostForms.channel_of(broker, request)
        if channel is None or not request.is_open or not asked_here(ctx, request):
            return None
        mode, _ = self.forms.choose(ctx, getattr(broker.channels[channel].config, "mode", "auto"))
        if mode is None:
            return None
        if await broker.state_get(channel, declined_key(request.id)) is not None:
            return None  # this person said no here
        if await broker.state_get(channel, linked_key(request.id)) is not None:
            return None  # they have the link: they answer on the page
        return channel, mode

    async def requests(self, ctx: AnyContext, broker: Broker, request: Request) -> dict[str, Any] | None:
        """The ``inputRequests`` of this ``tasks/get``, or None when the host has nothing to fill in."""
        offerable = await self._offerable(ctx, broker, request)
        if offerable is None:
            return None
        channel, mode = offerable
        offered = await self._load(broker, channel, request.id)
        if offered.attempt > FORM_ATTEMPTS:
            return None
        who = responder(ctx)
        if not offered.shown or offered.mode != mode:
            offered.mode, offered.shown = mode, True
            if mode == "url":
                assert self.forms.linking is not None  # choose() gives url only with an inbox address
                offered.url = self.forms.linking.url(request, channel, who)
            await broker.record(
                request.id, f"{'link' if mode == 'url' else 'form'}_offered", who, {"channel": channel}
            )
            await self._save(broker, channel, request.id, offered)
        params: ElicitRequestFormParams | ElicitRequestURLParams
        if offered.mode == "url" and offered.url is not None:
            params = ElicitRequestURLParams(
                message=link_message(request, channel),
                url=offered.url,
                elicitation_id=f"{request.id}-{offered.attempt}",
            )
        else:
            form = render_form(broker, request, channel)
            message = form.message if offered.note is None else f"{offered.note}\n\n{form.message}"
            params = ElicitRequestFormParams(message=message, requested_schema=form.schema)
        dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        return {offered.key: {"method": METHOD, "params": dumped}}

    async def answer(
        self, ctx: AnyContext, broker: Broker, request: Request, responses: dict[str, Any]
    ) -> None:
        """Apply a ``tasks/update``: only the key now outstanding counts; others are ignored (spec)."""
        channel = HostForms.channel_of(broker, request)
        if channel is None or not asked_here(ctx, request):
            return  # the form counts only where the request was asked
        offered = await self._load(broker, channel, request.id)
        if not offered.shown or offered.key not in responses:
            return
        try:
            answer = ElicitResult.model_validate(responses[offered.key])
        except ValidationError:
            raise ValueError(f"inputResponses[{offered.key!r}] is not an elicitation result") from None
        # the key is spent whatever happens next: the next offer, if any, gets a new one
        offered = Offered(attempt=offered.attempt + 1, mode=offered.mode, note=None, url=None, shown=False)
        await self._save(broker, channel, request.id, offered)
        note = await self.forms.settle(broker, request, channel, answer, responder(ctx), offered.mode)
        if note is not None:
            offered.note = note
            await self._save(broker, channel, request.id, offered)
