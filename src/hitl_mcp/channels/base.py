"""The one small protocol every channel implements.

A channel module (``hitl_mcp.channels.<type>``) exports two names:

- ``Config``: a pydantic model of its YAML block (``extra="forbid"``, a ``type`` literal, secrets
  as ``SecretStr``). It must import nothing heavy: config is validated without the provider library.
- ``Channel``: a subclass of :class:`Channel` below, built as ``Channel(name, config, hub)``.

Sending goes through ``deliver`` (and ``retract`` once the request is settled). Inbound replies are
parsed and verified inside the channel, then handed to ``hub.resolve``: the broker is the only writer
of a request's outcome. Channels never import each other and never touch the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from hitl_mcp.models import Reply, Request, Settled

if TYPE_CHECKING:  # config validation imports channel modules: keep them light
    from starlette.routing import BaseRoute


class ChannelConfig(BaseModel):
    """Base of every channel's config block."""

    model_config = ConfigDict(extra="forbid")

    type: str


@dataclass
class Delivery:
    """What ``deliver`` reports: the provider's message reference, and anything worth keeping."""

    ref: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class DeliveryError(Exception):
    """A send that failed. ``retry_after`` (seconds) marks it as worth retrying, e.g. on a 429.

    The message is stored and shown to users: never put a secret in it.
    """

    def __init__(self, message: str, *, retry_after: float | None = None, permanent: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


#: what ``Hub.resolve`` returns: the one result of settling a request (models.Settled)
ResolveResult = Settled


class Hub(Protocol):
    """What a channel may ask of the broker. ``channel`` arguments are the channel's own name."""

    public_url: str | None
    state_dir: Path

    async def resolve(self, request_id: str, reply: Reply) -> ResolveResult:
        """Hand over a verified reply; raises ``ReplyInvalid`` (from hitl_mcp.broker) if it does not fit."""
        ...

    async def get(self, request_id: str) -> Request | None: ...

    async def open_requests(self, channel: str) -> list[tuple[Request, Delivery]]:
        """Pending requests this channel delivered, oldest first, with what ``deliver`` returned."""
        ...

    async def find_by_ref(self, channel: str, ref: str) -> Request | None:
        """The request this channel delivered under a provider reference (any status)."""
        ...

    async def state_get(self, channel: str, key: str) -> str | None:
        """Durable per-channel state: poll marks, cursors, UIDVALIDITY..."""
        ...

    async def state_set(self, channel: str, key: str, value: str) -> None: ...

    async def first_seen(self, channel: str, external_id: str) -> bool:
        """De-duplication of inbound ids (retries, redeliveries): true only the first time."""
        ...

    async def record(
        self, request_id: str | None, event: str, actor: str | None, data: dict[str, Any]
    ) -> None:
        """Append to the audit log, e.g. a reply ignored because its sender is not allowed."""
        ...


class Channel:
    """Base class: override ``deliver``; the rest is optional."""

    type: ClassVar[str] = ""
    #: whether a person can answer through this channel (False for notify-only channels); may be
    #: set per instance (e.g. an email channel with neither IMAP nor answer links)
    answerable: bool = True
    #: routes are mounted at /webhooks/<channel name>/; also at /webhooks/<webhook_alias>/ when this
    #: is the only channel of its type (e.g. "slack", "twilio"), as providers' docs expect
    webhook_alias: ClassVar[str | None] = None
    #: the package extra that installs this channel's libraries: ``pip install 'mcp-hitl[<extra>]'``
    extra: ClassVar[str | None] = None
    #: the host's own form: ``ask_user`` and ``request_approval`` without a channel list of their own
    #: offer it beside the inbox (only to a client that can show it)
    is_form: ClassVar[bool] = False
    #: the web inbox: the JSON API's replies come in under its name, and its token guards the inbox
    is_inbox: ClassVar[bool] = False

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        """The top-level modules this channel, so configured, imports when it runs (each must be
        installed: ``serve``, ``check`` and ``test-channel`` refuse to start without them)."""
        return ()

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        self.name = name
        self.config = config
        self.hub = hub

    async def start(self) -> None:
        """Open sockets or start pollers. Called once, before any delivery."""

    async def close(self) -> None:
        """Undo ``start``."""

    def routes(self) -> list[BaseRoute]:
        """Inbound webhook routes, mounted under ``/webhooks/<channel name>/``."""
        return []

    def may_approve(self, risk: str | None) -> bool:
        """Whether an approval of this risk may be given here (a person answers every channel but
        the host's own form, which the MCP client draws)."""
        return True

    @property
    def check_seconds(self) -> float:
        """How long ``check`` may take: longer than the channel's own timeouts, so that a server
        that never answers is reported by the channel, which can say which server and for how long."""
        return 30.0

    async def check(self) -> str:
        """Verify credentials and reachability (``hitl-mcp check``); return a short description, or
        raise ``DeliveryError`` saying what is wrong. Must work without ``start``."""
        return "ok"

    async def deliver(self, request: Request) -> Delivery:
        """Send the request (or a notification). Must work without ``start`` (``test-channel``)."""
        raise NotImplementedError

    @property
    def retracts(self) -> bool:
        """Whether settling a request sends anything here; when not, no retraction is queued."""
        return type(self).retract is not Channel.retract

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Tell the person the request is settled (``request`` carries the outcome)."""
