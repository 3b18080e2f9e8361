"""Microsoft Teams: the bot's side of the Bot Connector, through the Teams SDK (``microsoft-teams-api``:
its ``ApiClient`` posts, updates and replies to activities; ``microsoft-teams-apps``' token validator
checks what Teams sends) and its token from Entra (MSAL, the client-credentials grant, as the SDK
gets it). Each failure becomes a ``DeliveryError`` that says what to fix and never holds a secret.
The SDK and MSAL are imported only here, when a Teams channel runs."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.teams.config import HTTP_TIMEOUT, INSTALL_HINT, Config
from hitl_mcp.core.retry import retry_after

if TYPE_CHECKING:
    from microsoft_teams.api import ApiClient
    from microsoft_teams.api.auth.cloud_environment import CloudEnvironment


def cloud_of(config: Config) -> CloudEnvironment:
    from microsoft_teams.api.auth.cloud_environment import from_name, with_overrides

    ends = config.endpoints
    return with_overrides(
        from_name(config.cloud),
        login_endpoint=ends.login,
        openid_metadata_url=ends.openid_metadata,
        token_issuer=ends.token_issuer,
    )


def load_sdk() -> None:
    """Import the Teams SDK (seconds, the first time): done in a worker thread by ``start``."""
    try:
        import microsoft_teams.api
        import microsoft_teams.apps.auth  # noqa: F401
        import msal  # noqa: F401
    except ImportError:
        raise DeliveryError(INSTALL_HINT, permanent=True) from None


class Connector:
    """The bot's token and its Bot Connector client, made once and kept."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._app: Any = None
        self._lock = threading.Lock()
        self._client: ApiClient | None = None

    # --- the token ---------------------------------------------------------------------------------

    def _token_sync(self) -> str:
        import msal

        config, cloud = self.config, cloud_of(self.config)
        assert config.app_id is not None and config.app_password is not None
        with self._lock:
            try:
                if self._app is None:  # MSAL reads the authority's OpenID configuration here
                    self._app = msal.ConfidentialClientApplication(
                        config.app_id,
                        client_credential=config.app_password.get_secret_value(),
                        authority=f"{cloud.login_endpoint}/{config.tenant_id or cloud.login_tenant}",
                        instance_discovery=False,  # the authority is the cloud's own: nothing to discover
                        timeout=HTTP_TIMEOUT,
                    )
                result = self._app.acquire_token_for_client(scopes=[cloud.bot_scope])
            except (ValueError, OSError) as exc:  # an unreadable configuration; requests' errors
                raise DeliveryError(
                    f"could not reach Entra at {cloud.login_endpoint} ({type(exc).__name__})"
                ) from None
        if "access_token" in result:
            return str(result["access_token"])
        error = str(result.get("error") or "error")
        said = str(result.get("error_description") or "").split("\r\n")[0].split("\n")[0][:200]
        permanent = error in ("invalid_client", "unauthorized_client", "invalid_request", "invalid_scope")
        hint = ": check app_id, app_password and tenant_id" if permanent else ""
        raise DeliveryError(f"Entra refused the bot's token ({error}: {said}){hint}", permanent=permanent)

    async def token(self) -> str:
        return await anyio.to_thread.run_sync(self._token_sync)

    # --- the Bot Connector -------------------------------------------------------------------------

    def client(self) -> ApiClient:
        if self._client is None:
            from microsoft_teams.api import ApiClient
            from microsoft_teams.common import ClientOptions

            options = ClientOptions(token=self.token, headers={"User-Agent": "hitl-mcp"})
            self._client = ApiClient(self.config.service_url, options, cloud=cloud_of(self.config))
        return self._client

    async def send(self, attachment: dict[str, Any], text: str | None = None) -> str:
        """Post a message with one card to the conversation; its activity id."""
        activity = _message(attachment, text)
        conversation = self.config.conversation_id or ""
        sent = await calling(
            "post the card", lambda: self.client().conversations.create_activity(conversation, activity)
        )
        return str(sent.id)

    async def update(self, activity_id: str, attachment: dict[str, Any]) -> None:
        activity = _message(attachment)
        conversation = self.config.conversation_id or ""
        await calling(
            "update the card",
            lambda: self.client().conversations.update_activity(conversation, activity_id, activity),
        )

    async def reply(self, activity_id: str, text: str) -> str:
        """A reply to the request's message: in its thread, in a channel."""
        from microsoft_teams.api.activities.message.message import MessageActivityInput

        activity = MessageActivityInput(text=text)
        conversation = self.config.conversation_id or ""
        client = self.client().conversations
        sent = await calling("reply", lambda: client.reply_to_activity(conversation, activity_id, activity))
        return str(sent.id)

    async def aclose(self) -> None:
        app, self._app = self._app, None
        if app is not None:
            app.http_client.close()  # MSAL's requests session: its keep-alive connection to Entra
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.http.http.aclose()


def _message(attachment: dict[str, Any], text: str | None = None) -> Any:
    from microsoft_teams.api.activities.message.message import MessageActivityInput
    from microsoft_teams.api.models import Attachment

    return MessageActivityInput(text=text).add_attachments(
        Attachment(content_type=attachment["contentType"], content=attachment["content"])
    )


async def calling(what: str, call: Callable[[], Awaitable[Any]]) -> Any:
    import httpx

    try:
        return await call()
    except DeliveryError:
        raise
    except httpx.HTTPStatusError as exc:
        raise refused(what, exc.response) from None
    except (TimeoutError, httpx.HTTPError) as exc:
        raise DeliveryError(f"{what}: could not reach the Bot Connector ({type(exc).__name__})") from None


def refused(what: str, response: Any) -> DeliveryError:
    status = response.status_code
    try:
        said = str((response.json().get("error") or {}).get("message") or status)
    except (ValueError, AttributeError):
        said = str(status)
    if status == 429:
        wait = retry_after(dict(response.headers))
        return DeliveryError(f"{what}: throttled by Teams", retry_after=5.0 if wait is None else wait)
    if status in (401, 403):
        return DeliveryError(
            f"{what}: the Bot Connector refused the bot ({status}: {said}); is the bot added to the "
            "conversation, and registered with this app_id?",
            permanent=True,
        )
    if status == 404:
        return DeliveryError(f"{what}: no such conversation or message ({said})", permanent=True)
    if status < 500:
        return DeliveryError(f"{what}: Teams refused it ({status}: {said})", permanent=True)
    return DeliveryError(f"{what}: Teams failed ({status}: {said})")
