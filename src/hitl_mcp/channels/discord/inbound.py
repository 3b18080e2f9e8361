"""Discord: the inbound side. Presses and modal submissions arrive as ``INTERACTION_CREATE`` over the
gateway WebSocket (discord.py's ``Client``: no public URL), are checked (a signed ``custom_id``, a user
in ``allowed_users``, an interaction seen once) and handed to the kit; every interaction is answered
within Discord's three seconds: an ephemeral note only the presser sees, a modal, or new buttons."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio

from hitl_mcp.channels._replies import choice_by_number
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.base import ChannelConfig, DeliveryError, Hub, Unknown, allowed
from hitl_mcp.channels.discord.api import EPHEMERAL, MESSAGE, MODAL, NO_MENTIONS, UPDATE, call, route
from hitl_mcp.channels.discord.config import ANSWER_LIMIT, GATEWAY_RETRY, Config, log
from hitl_mcp.channels.discord.render import (
    ANSWER_INPUT,
    APPROVE,
    BACK,
    CONFIRM,
    DENY,
    REMEMBER,
    SUBMIT,
    WORDS,
    ButtonTokens,
    clip,
    components,
    modal,
)
from hitl_mcp.channels.fitting import approve_here
from hitl_mcp.core.models import Kind, Reply, Request
from hitl_mcp.core.wording import already
from hitl_mcp.kit.signing import derive_key

#: interaction types: a press on a button, a modal submitted
COMPONENT, MODAL_SUBMIT = 3, 5


class DiscordInbound(BaseChannel):
    """The part of the channel that reads answers; ``DiscordChannel`` adds sending and the lifecycle."""

    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        self._http: Any = None  # discord.py's HTTPClient, logged in, while started
        self._client: Any = None  # discord.py's Client on the gateway, while connected

    @property
    def tokens(self) -> ButtonTokens:
        """Keys derived from the bot token: every server of this bot signs and checks alike."""
        return ButtonTokens(derive_key(self.config.bot_token.get_secret_value(), "hitl-mcp discord buttons"))

    def _components(self, request: Request, confirming: bool = False) -> list[dict[str, Any]]:
        inbox = f"{self.public_url.rstrip('/')}/requests/{request.id}" if self.public_url else None
        approve = approve_here(self, request) is None
        return components(request, self.tokens, confirming=confirming, approve=approve, inbox=inbox)

    # --- the gateway -----------------------------------------------------------------------------

    async def _gateway_forever(self) -> None:
        """discord.py's Client on the gateway (it resumes and reconnects by itself); started again
        with a backoff when it gives up, and not at all when Discord refuses the token."""
        import discord

        from hitl_mcp.channels.discord.api import point_at

        point_at(self.config)
        attempt = 0
        while True:
            client = discord.Client(intents=discord.Intents.none())

            async def on_interaction(interaction: Any) -> None:
                await self._on_interaction(interaction)

            client.event(on_interaction)
            self._client = client
            try:
                await client.start(self.config.bot_token.get_secret_value(), reconnect=True)
                attempt = 0
            except discord.LoginFailure:
                log.error("discord %s: Discord refused the bot_token; answers will not arrive", self.name)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the gateway refused us, or could not be reached
                attempt += 1
                log.warning(
                    "discord %s: gateway: %s; connecting again in %.0fs",
                    self.name,
                    type(exc).__name__,
                    GATEWAY_RETRY.delay(attempt),
                    exc_info=True,
                )
            finally:
                self._client = None
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await client.close()
            await asyncio.sleep(GATEWAY_RETRY.delay(max(attempt, 1)))

    async def _on_interaction(self, interaction: Any) -> None:
        try:
            await self._handle(interaction)
        except Exception:
            log.exception("discord %s: could not handle interaction %s", self.name, interaction.id)
            await self._respond(interaction, MESSAGE, _note("Not recorded: hitl-mcp failed; try again."))

    async def _handle(self, interaction: Any) -> None:
        kind = int(interaction.type.value)
        if kind not in (COMPONENT, MODAL_SUBMIT):
            return  # slash commands, autocomplete: not ours
        if await self.state.seen(f"interaction:{interaction.id}"):
            return  # the same interaction again (a resumed gateway session replays)
        data: dict[str, Any] = interaction.data or {}
        user = interaction.user
        user_id, who = str(user.id), _who(user)
        parsed = self.tokens.read(data.get("custom_id"))
        if parsed is None or (kind == MODAL_SUBMIT) != (parsed[1] == SUBMIT):
            await self.ignore(None, who, "a button hitl-mcp did not sign", user_id=user_id)
            await self._respond(interaction, MESSAGE, _note("This button is not valid."))
            return
        request_id, action = parsed
        if not allowed(user_id, self.config.answerers):
            reason = "not in allowed_users" if self.config.answerers else "allowed_users is not set"
            await self.ignore(request_id, who, reason, user_id=user_id)
            await self._respond(interaction, MESSAGE, _note("You are not allowed to answer this request."))
            return
        request = await self.hub.get(request_id)
        if request is None:
            await self._respond(interaction, MESSAGE, _note(Unknown(request_id).words))
            return
        if action in (WORDS, BACK) and not request.is_open:
            await self._respond(interaction, MESSAGE, _note(f"Not recorded: {already(request)}."))
            return
        if action == WORDS and request.kind == Kind.QUESTION:
            await self._respond(interaction, MODAL, modal(request, self.tokens))
            return
        if request.is_open and request.kind == Kind.APPROVAL and action in (APPROVE, BACK):
            if action == BACK or (request.risk == "high" and not request.step_up):
                rows = self._components(request, confirming=action == APPROVE)
                await self._respond(interaction, UPDATE, {"components": rows})
                return
        fields = _fields(request, action, data)
        if fields is None:
            await self.ignore(request_id, who, f"a button that does not fit the request ({action})")
            await self._respond(interaction, MESSAGE, _note("This button does not fit the request."))
            return
        outcome = await self.answer(
            request_id, Reply(channel=self.name, responder=who, identity=user_id, **fields)
        )
        await self._respond(interaction, MESSAGE, _note(outcome.words))

    async def _respond(self, interaction: Any, kind: int, data: dict[str, Any]) -> None:
        """The interaction's one response (best effort: a failure is logged)."""
        http = self._client.http if self._client is not None else self._http
        if http is None:
            return
        path = "/interactions/{interaction_id}/{interaction_token}/callback"
        where = route("POST", path, interaction_id=interaction.id, interaction_token=interaction.token)
        try:
            await call(
                http.request(where, json={"type": kind, "data": data}), "interaction callback", self.config
            )
        except DeliveryError as exc:
            log.warning("discord %s: %s", self.name, exc)


def _fields(request: Request, action: str, data: dict[str, Any]) -> dict[str, Any] | None:
    if action == SUBMIT:
        text = _submitted(data)
        choice = choice_by_number(text, request.choices)
        return {"choice": choice} if choice is not None else {"text": text[:ANSWER_LIMIT]}
    if action in (APPROVE, CONFIRM):
        return {"decision": "approve"}
    if action == REMEMBER and request.risk != "high":
        return {"decision": "approve", "remember": True}
    if action == DENY:
        return {"decision": "deny"}
    if action.isdigit() and int(action) < len(request.choices or []):
        return {"choice": (request.choices or [])[int(action)]}
    return None


def _submitted(data: dict[str, Any]) -> str:
    """The text typed in the modal's one input."""
    for row in data.get("components") or []:
        for component in row.get("components") or []:
            if component.get("custom_id") == ANSWER_INPUT:
                return str(component.get("value") or "")
    return ""


def _note(text: str) -> dict[str, Any]:
    """An ephemeral message: only the person who pressed sees it."""
    return {"content": clip(text, 2000), "flags": EPHEMERAL, "allowed_mentions": NO_MENTIONS}


def _who(user: Any) -> str:
    """How a person is recorded: ``@name (id)``; the id is what is checked."""
    return f"@{user.name} ({user.id})" if getattr(user, "name", None) else str(user.id)
