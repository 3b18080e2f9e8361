"""A local Microsoft Teams, in its wire formats, so that the channel's own clients (the Teams SDK's
``ApiClient``, MSAL, PyJWT's key client) talk to it:

- **Entra** (served over HTTPS, as MSAL insists: ``entra_app`` with a ``trustme`` certificate): the
  tenant's OpenID configuration and the client-credentials token endpoint, which checks the app id,
  the secret and the scope, and issues opaque access tokens.
- **the Bot Connector** (``app``): ``POST /v3/conversations/{id}/activities`` (a new message),
  ``PUT …/activities/{activity}`` (an update), ``POST …/activities/{activity}`` (a reply), and the
  members; each wants a token Entra issued (401 otherwise); ``throttle`` answers the next calls 429.
- **Bot Framework's signing keys** (``app``): ``/v1/.well-known/keys``, whose key signs every
  activity the stand-in sends the bot, as Teams' are signed (RS256, issuer, audience = the bot's app
  id, ``serviceurl``, expiry).

It also plays the people: ``press`` does what Teams does when someone presses an ``Action.Execute``
button (an ``adaptiveCard/action`` invoke with the button's data and the card's inputs, from the
person's Entra object id) and returns the invoke's answer. Every call fires ``changes``.
"""

from __future__ import annotations

import copy
import itertools
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.events import Changes, until

APP_ID = "6f1c4a52-3b1e-4c8e-9a55-0d2f7e1b9c01"
SECRET = "teams-app-secret-standin-0123"
TENANT = "botframework.com"
ISSUER = "https://api.botframework.com"
SCOPE = "https://api.botframework.com/.default"
CONVERSATION = "19:hitl-approvals@thread.tacv2"
OLIVE = "0a6e9b1c-2d3f-4a5b-8c7d-9e0f1a2b3c4d"
SAM = "1b7f0c2d-3e4a-4b6c-9d8e-0f1a2b3c4d5e"
EVE = "2c8a1d3e-4f5b-4c7d-8e9f-1a2b3c4d5e6f"
NAMES = {OLIVE: "Olive", SAM: "Sam", EVE: "Eve"}
_ids = itertools.count(1)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Message:
    id: str
    activity: dict[str, Any]
    versions: list[dict[str, Any]] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)

    @property
    def card(self) -> dict[str, Any]:
        (attachment,) = self.activity["attachments"]
        assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
        return dict(attachment["content"])

    def texts(self) -> list[str]:
        return [b["text"] for b in self.card["body"] if b["type"] == "TextBlock"]

    def buttons(self) -> list[str]:
        return [a["title"] for a in self.card.get("actions") or []]

    def button(self, title: str) -> dict[str, Any]:
        found = [a for a in self.card.get("actions") or [] if a["title"] == title]
        assert len(found) == 1, f"no single button {title!r} in {self.buttons()}"
        return found[0]


class TeamsStandin:
    def __init__(self) -> None:
        self.key = _key()
        self.kid = secrets.token_hex(8)
        self.base = ""  # the Bot Connector's and the keys' address, once served
        self.tokens: set[str] = set()
        self.token_requests: list[dict[str, str]] = []
        self.messages: dict[str, Message] = {}
        self.order: list[str] = []
        self.throttle = 0
        self.changes = Changes()
        self.app = Starlette(
            routes=[
                Route("/v1/.well-known/keys", self._keys),
                Route("/v3/conversations/{cid}/activities", self._create, methods=["POST"]),
                Route("/v3/conversations/{cid}/activities/{aid}", self._update, methods=["PUT"]),
                Route("/v3/conversations/{cid}/activities/{aid}", self._reply, methods=["POST"]),
                Route("/v3/conversations/{cid}/members", self._members),
            ]
        )
        self.entra_app = Starlette(
            routes=[
                Route("/{tenant}/v2.0/.well-known/openid-configuration", self._openid),
                Route("/{tenant}/oauth2/v2.0/token", self._token, methods=["POST"]),
            ]
        )

    @property
    def service_url(self) -> str:
        return f"{self.base}/"

    async def until(self, check: Any, seconds: float = 10) -> Any:
        return await until(check, self.changes, seconds)

    def last(self) -> Message:
        return self.messages[self.order[-1]]

    # --- Entra -------------------------------------------------------------------------------------

    async def _openid(self, request: Request) -> Response:
        base = f"{request.url.scheme}://{request.url.netloc}/{request.path_params['tenant']}"
        return JSONResponse(
            {
                "token_endpoint": f"{base}/oauth2/v2.0/token",
                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                "issuer": f"{base}/v2.0",
            }
        )

    async def _token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_requests.append({k: v for k, v in form.items() if k != "client_secret"})
        self.changes.fire()
        if form.get("grant_type") != "client_credentials" or form.get("scope") != SCOPE:
            return JSONResponse({"error": "invalid_request", "error_description": "AADSTS9000: grant"}, 400)
        if form.get("client_id") != APP_ID or form.get("client_secret") != SECRET:
            return JSONResponse(
                {
                    "error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret provided.\r\nTrace ID: x",
                },
                status_code=401,
            )
        token = secrets.token_urlsafe(24)
        self.tokens.add(token)
        return JSONResponse({"token_type": "Bearer", "expires_in": 3599, "access_token": token})

    # --- the Bot Connector -------------------------------------------------------------------------

    def _refused(self, request: Request) -> Response | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme != "Bearer" or token not in self.tokens:
            return JSONResponse({"error": {"code": "Unauthorized", "message": "no valid token"}}, 401)
        if request.path_params.get("cid") != CONVERSATION:
            return JSONResponse({"error": {"code": "NotFound", "message": "no such conversation"}}, 404)
        if self.throttle:
            self.throttle -= 1
            self.changes.fire()
            return JSONResponse(
                {"error": {"code": "Throttled", "message": "slow down"}}, 429, headers={"Retry-After": "0"}
            )
        return None

    async def _create(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        activity = await request.json()
        parent = self.messages.get(activity.get("replyToId") or "")
        if parent is not None:  # a reply (the Teams SDK posts it with replyToId)
            parent.replies.append(activity)
            self.changes.fire()
            return JSONResponse({"id": f"{parent.id}-r{len(parent.replies)}"}, status_code=201)
        message = Message(f"1:{next(_ids)}", activity)
        self.messages[message.id] = message
        self.order.append(message.id)
        self.changes.fire()
        return JSONResponse({"id": message.id}, status_code=201)

    async def _update(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        message = self.messages.get(request.path_params["aid"])
        if message is None:
            return JSONResponse({"error": {"code": "NotFound", "message": "no such activity"}}, 404)
        message.versions.append(copy.deepcopy(message.activity))
        message.activity = await request.json()
        self.changes.fire()
        return JSONResponse({"id": message.id})

    async def _reply(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        message = self.messages.get(request.path_params["aid"])
        if message is None:
            return JSONResponse({"error": {"code": "NotFound", "message": "no such activity"}}, 404)
        message.replies.append(await request.json())
        self.changes.fire()
        return JSONResponse({"id": f"{message.id}-r{len(message.replies)}"}, status_code=201)

    async def _members(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        return JSONResponse([{"id": f"29:{u}", "aadObjectId": u, "name": n} for u, n in NAMES.items()])

    async def _keys(self, request: Request) -> Response:
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return JSONResponse(
            {"keys": [{**public, "kid": self.kid, "use": "sig", "endorsements": ["msteams"]}]}
        )

    # --- Teams, sending to the bot -----------------------------------------------------------------

    def token_for(self, *, key: rsa.RSAPrivateKey | None = None, **claims: Any) -> str:
        """A Bot Framework token as Teams sends it to the bot."""
        now = int(time.time())
        body = {"iss": ISSUER, "aud": APP_ID, "serviceurl": self.service_url, "nbf": now, "iat": now}
        body |= {"exp": now + 3600, **claims}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": self.kid})

    async def send(
        self, bot: str, activity: dict[str, Any], token: str | None = None
    ) -> tuple[int, dict[str, Any] | None]:
        """POST an activity to the bot's messaging endpoint ``bot``; the status and JSON answer."""
        token = self.token_for() if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(timeout=10) as client:
            response = await client.post(f"{bot}/api/messages", json=activity, headers=headers)
        self.changes.fire()
        return response.status_code, (response.json() if response.content else None)

    def invoke(
        self, message: Message, title: str, user: str, inputs: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The ``adaptiveCard/action`` invoke Teams sends when ``user`` presses ``title``."""
        action = message.button(title)
        return {
            "type": "invoke",
            "name": "adaptiveCard/action",
            "id": f"f:{secrets.token_hex(8)}",
            "channelId": "msteams",
            "serviceUrl": self.service_url,
            "from": {"id": f"29:{user}", "aadObjectId": user, "name": NAMES[user]},
            "conversation": {"id": CONVERSATION, "conversationType": "channel"},
            "recipient": {"id": f"28:{APP_ID}", "name": "hitl"},
            "replyToId": message.id,
            "value": {
                "action": {
                    "type": "Action.Execute",
                    "verb": action["verb"],
                    "data": {**action["data"], **(inputs or {})},
                },
                "trigger": "manual",
            },
        }

    async def press(
        self, bot: str, message: Message, title: str, user: str, inputs: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any] | None]:
        return await self.send(bot, self.invoke(message, title, user, inputs))
