"""Microsoft Teams: the bot's messaging endpoint. Teams POSTs every activity to
``/webhooks/<channel>/api/messages`` with a Bot Framework token; the token is verified (its signature
by the keys of the cloud's OpenID metadata, issuer, audience = the bot's app id, expiry, and its
``serviceurl`` claim against the activity's) before anything is read. A press of a card's
``Action.Execute`` button is an ``adaptiveCard/action`` invoke: its data signed by hitl-mcp, the
activity taken once, the person's Entra object id on the allow-list; the answer to the invoke is the
card that replaces the pressed one (Universal Actions), or a message only the presser sees."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import Answered, ChannelConfig, Hub, Late, Unknown, allowed
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.fitting import approve_here, shown
from hitl_mcp.channels.teams.api import Connector, cloud_of
from hitl_mcp.channels.teams.config import MAX_BODY, Config, log
from hitl_mcp.channels.teams.render import (
    ANSWER_INPUT,
    APPROVE,
    BACK,
    CONFIRM,
    DENY,
    SEND,
    ActionTokens,
    card,
    outcome_line,
)
from hitl_mcp.core.models import Kind, Reply, Request
from hitl_mcp.kit.net import read_within
from hitl_mcp.kit.signing import derive_key

MESSAGES_PATH = "/api/messages"
INVOKE = "adaptiveCard/action"
CARD_RESPONSE = "application/vnd.microsoft.card.adaptive"
MESSAGE_RESPONSE = "application/vnd.microsoft.activity.message"


def said(text: str) -> JSONResponse:
    """An invoke's answer that only the presser sees; the card stays as it is."""
    return JSONResponse({"statusCode": 200, "type": MESSAGE_RESPONSE, "value": text})


class TeamsInbound(BaseChannel):
    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        self.connector = Connector(self.config)
        self._validator: Any = None
        secret = self.config.app_password.get_secret_value() if self.config.app_password else ""
        self.tokens = ActionTokens(derive_key(secret, "hitl-mcp teams actions"))

    def inbox_of(self, request: Request) -> str | None:
        return f"{self.public_url.rstrip('/')}/requests/{request.id}" if self.public_url else None

    def card_of(
        self, request: Request, *, confirming: bool = False, outcome: str | None = None
    ) -> dict[str, Any]:
        return card(
            request,
            self.tokens if self.config.bot else None,
            inbox=self.inbox_of(request),
            confirming=confirming,
            approve=approve_here(self, request) is None,
            outcome=outcome,
            preview=shown(self, request),
        )

    # --- the messaging endpoint --------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        return [Route(MESSAGES_PATH, self._messages, methods=["POST"])] if self.config.bot else []

    async def _verified(self, http: HttpRequest, service_url: str) -> dict[str, Any] | None:
        """The token's claims, or None when Teams did not send this."""
        import jwt
        from microsoft_teams.apps.auth import TokenValidator

        scheme, _, token = http.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        if self._validator is None:
            assert self.config.app_id is not None
            self._validator = TokenValidator.for_service(self.config.app_id, cloud=cloud_of(self.config))
        # the SDK's validator fetches the signing keys with blocking I/O: run it off the event loop
        try:
            claims: dict[str, Any] = await anyio.to_thread.run_sync(
                asyncio.run, self._validator.validate_token(token, service_url)
            )
        except (jwt.InvalidTokenError, jwt.PyJWKClientError) as exc:
            log.warning("teams %s: refused an activity: %s", self.name, type(exc).__name__)
            return None
        return claims

    async def _messages(self, http: HttpRequest) -> Response:
        body = await read_within(http.stream(), MAX_BODY)
        if body is None:
            return JSONResponse({"error": "body too large"}, status_code=413)
        try:
            activity = json.loads(body)
            assert isinstance(activity, dict) and isinstance(activity.get("serviceUrl"), str)
        except (ValueError, AssertionError):
            return JSONResponse({"error": "expected a Bot Framework activity (JSON)"}, status_code=400)
        if await self._verified(http, activity["serviceUrl"]) is None:
            return JSONResponse({"error": "not a verified Bot Framework activity"}, status_code=401)
        kind = activity.get("type")
        if kind == "invoke" and activity.get("name") == INVOKE:
            return await self._press(activity)
        if kind == "conversationUpdate":
            conversation = (activity.get("conversation") or {}).get("id")
            if conversation and conversation != self.config.conversation_id:
                log.info(
                    "teams %s: the bot is in conversation %s (set conversation_id to it to post there)",
                    self.name,
                    conversation,
                )
        return Response(status_code=200)

    async def _press(self, activity: dict[str, Any]) -> Response:
        sender, value = _object(activity.get("from")), _object(activity.get("value"))
        user_id = str(sender.get("aadObjectId") or "").lower()
        who = f"{sender['name']} ({user_id})" if sender.get("name") and user_id else user_id
        data = _object(value.get("action")).get("data")
        parsed = self.tokens.read(data)
        if parsed is None or not isinstance(data, dict) or not activity.get("id"):
            await self.ignore(None, who or None, "a button hitl-mcp did not sign", user_id=user_id)
            return said("This button is not valid.")
        if await self.state.seen(f"invoke:{activity['id']}"):
            return said("This press was handled already.")
        request_id, action = parsed
        if not allowed(user_id, self.config.answerers):
            reason = "not in allowed_users" if self.config.answerers else "allowed_users is not set"
            await self.ignore(request_id, who or None, reason, user_id=user_id)
            return said("You are not allowed to answer this request.")
        request = await self.hub.get(request_id)
        if request is None:
            return said(Unknown(request_id).words)
        if request.is_open and request.kind == Kind.APPROVAL and action in (APPROVE, BACK):
            if action == BACK or (request.risk == "high" and not request.step_up):
                return _card(self.card_of(request, confirming=action == APPROVE))
        fields = _button_fields(request, action, data)
        if fields is None and action == SEND and request.is_open:
            return said("Type your answer, then press Send.")
        if fields is None:
            await self.ignore(request_id, who, f"a button that does not fit the request ({action})")
            return said("This button does not fit the request.")
        outcome = await self.answer(
            request_id, Reply(channel=self.name, responder=who, identity=user_id, **fields)
        )
        # settled (by this press, or before it): the card that replaces the pressed one says how
        settled = outcome.request if isinstance(outcome, Answered | Late) else None
        if settled is not None and not settled.is_open:
            return _card(self.card_of(settled, outcome=outcome_line(settled, self.name)))
        return said(outcome.words)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _card(content: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"statusCode": 200, "type": CARD_RESPONSE, "value": content})


def _button_fields(request: Request, action: str, data: dict[str, Any]) -> dict[str, Any] | None:
    if action in (APPROVE, CONFIRM):
        return {"decision": "approve"}
    if action == DENY:
        return {"decision": "deny"}
    if action == SEND:
        text = data.get(ANSWER_INPUT)
        return {"text": text.strip()} if isinstance(text, str) and text.strip() else None
    if action.isdigit() and int(action) < len(request.choices or []):
        return {"choice": (request.choices or [])[int(action)]}
    return None
