"""The one small protocol every channel implements.

A channel module (``hitl_mcp.channels.<type>``) exports two names:

- ``Config``: a pydantic model of its YAML block (``extra="forbid"``, a ``type`` literal, secrets
  as ``SecretStr``). It must import nothing heavy: config is validated without the provider library.
- ``Channel``: a subclass of :class:`Channel` below, built as ``Channel(name, config, hub)``.

Sending goes through ``deliver`` (and ``retract`` once the request is settled). Inbound replies are
parsed and verified inside the channel, then handed to :meth:`Channel.answer`, which resolves them
through the hub (the broker is the only writer of a request's outcome) and returns what happened:
:class:`Answered` (or its :class:`Counted`, a quorum's vote that did not settle it yet),
:class:`Late`, :class:`Invalid` or :class:`Unknown`, each with the words to tell the person. A reply
that is not let through is recorded once by :meth:`Channel.ignore`. Channels never import each other
and never touch the store: they keep what they must remember in ``self.state``.

The rest of the kit: :func:`allowed` (allow-lists that fail closed), ``channels._replies`` (the yes/no
words of text channels), ``hitl_mcp.core.retry`` (``RetryPolicy``, ``retry_after``), ``hitl_mcp.core.wording``
and ``hitl_mcp.core.durations``; ``channels.testing`` has a channel for tests. See docs/channels.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

from hitl_mcp.core.durations import DAY, bounded
from hitl_mcp.core.errors import NotFound, ReplyInvalid
from hitl_mcp.core.models import Reply, Request, Settled

__all__ = [
    "Answered",
    "Channel",
    "ChannelConfig",
    "Counted",
    "Delivery",
    "DeliveryError",
    "Hub",
    "Invalid",
    "Late",
    "NotFound",
    "Outcome",
    "ReplyInvalid",
    "ResolveResult",
    "State",
    "Unknown",
    "allowed",
]

log = logging.getLogger("hitl_mcp.channels")

if TYPE_CHECKING:  # config validation imports channel modules: keep them light
    from starlette.routing import BaseRoute

    from hitl_mcp.channels._exclusive import Running
    from hitl_mcp.channels.fitting import Room
    from hitl_mcp.core.store import Lease


class ChannelConfig(BaseModel):
    """Base of every channel's config block."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    type: str
    digest: Annotated[float, bounded(60, DAY)] | None = None
    """``notify_user`` messages at level ``info`` are held and sent here together, one message per
    window of this length (a duration, 1m to 1d: ``15m``); questions, approvals and louder
    notifications go at once. See ``hitl_mcp.broker.digests``."""
    #: False for a channel that sends no messages to batch (the inbox, the host's form)
    takes_digest: ClassVar[bool] = True

    @field_validator("digest")
    @classmethod
    def _digest_taken(cls, value: float | None) -> float | None:
        if value is not None and not cls.takes_digest:
            raise PydanticCustomError(
                "digest", "this channel sends no messages to batch: set digest on a channel that does"
            )
        return value


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
        """Hand over a verified reply; raises ``ReplyInvalid`` if it does not fit, ``NotFound`` for an
        unknown id (both from :mod:`hitl_mcp.core.errors`). Channels call :meth:`Channel.answer` instead."""
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

    async def try_lease(self, name: str) -> Lease | None:
        """The lease ``name`` among the processes on the store, or None: see ``in_background``."""
        ...


# ------------------------------------------------------------------------------ what a reply did


@dataclass(frozen=True)
class Answered:
    """The reply won: it is the request's outcome."""

    request: Request

    @property
    def words(self) -> str:
        from hitl_mcp.core.wording import answered_what

        return f"Recorded: {answered_what(self.request)}."


@dataclass(frozen=True)
class Counted(Answered):
    """A vote counted toward a quorum that is not reached yet (``progress``: "1 of 2 approvals —
    waiting for security or owner"); ``request`` is still pending. Channels that handle
    :class:`Answered` handle it too: its ``words`` say it."""

    progress: str = ""

    @property
    def words(self) -> str:
        return f"Recorded your vote: {self.progress}."


@dataclass(frozen=True)
class Late:
    """The request was settled before this reply (``reason``: "already answered by X via Y")."""

    request: Request
    reason: str

    @property
    def words(self) -> str:
        return f"Not recorded: {self.reason}."


@dataclass(frozen=True)
class Invalid:
    """The reply does not fit the request (``reason`` says why: a choice not offered...)."""

    request_id: str
    reason: str

    @property
    def words(self) -> str:
        return f"Not recorded: {self.reason}."


@dataclass(frozen=True)
class Unknown:
    """No such request."""

    request_id: str
    words: ClassVar[str] = "Not recorded: hitl-mcp does not know this request."


Outcome = Answered | Late | Invalid | Unknown  # Counted is an Answered


def allowed(who: str | None, answerers: Collection[str] | None) -> bool:
    """Whether ``who`` may answer: only when named in ``answerers``. An unset or empty list, or an
    unknown sender, lets nobody in (allow-lists fail closed)."""
    return bool(who and answerers and who in answerers)


# ------------------------------------------------------------------------------ a channel's state


class State:
    """A channel's own durable state, namespaced by its name (Apprise's ``self.store``): poll marks,
    cursors, codes, and the inbound ids it has seen. Pruned once the requests it is about are long
    settled (keys that end in ``:<request id>``; see ``Store.prune``)."""

    def __init__(self, hub: Hub, channel: str) -> None:
        self._hub = hub
        self._channel = channel

    async def get(self, key: str) -> str | None:
        return await self._hub.state_get(self._channel, key)

    async def set(self, key: str, value: str) -> None:
        await self._hub.state_set(self._channel, key, value)

    async def load(self, key: str, default: Any = None) -> Any:
        """A JSON value; ``default`` (else ``{}``) when there is none."""
        raw = await self.get(key)
        return json.loads(raw) if raw else {} if default is None else default

    async def save(self, key: str, value: Any) -> None:
        await self.set(key, json.dumps(value))

    async def seen(self, external_id: str) -> bool:
        """Whether this inbound id (a message id, a retry of a webhook) was seen before; the first
        call for an id says False, every later one True."""
        return not await self._hub.first_seen(self._channel, external_id)


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
        self.log = logging.getLogger(f"hitl_mcp.channels.{self.type or name}")
        self._background: list[Running] = []

    # --- the kit -------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """This channel's durable state: ``await self.state.get(key)``, ``self.state.seen(id)``."""
        return State(self.hub, self.name)

    @property
    def public_url(self) -> str | None:
        """The server's public address, or None (also when built without a hub, for ``check``)."""
        return getattr(self.hub, "public_url", None)

    async def open_requests(self) -> list[tuple[Request, Delivery]]:
        """Pending requests delivered here, oldest first, with what ``deliver`` returned."""
        return await self.hub.open_requests(self.name)

    async def find_by_ref(self, ref: str) -> Request | None:
        """The request delivered here under a provider reference (any status)."""
        return await self.hub.find_by_ref(self.name, ref)

    async def answer(self, request_id: str, reply: Reply) -> Outcome:
        """Resolve a verified reply through the hub and say what it did; never raises for a reply
        that does not fit or a request that does not exist."""
        try:
            result = await self.hub.resolve(request_id, reply)
        except ReplyInvalid as exc:
            return Invalid(request_id, str(exc))
        except NotFound:
            return Unknown(request_id)
        if result.counted:
            return Counted(result.request, result.reason)
        return Answered(result.request) if result.won else Late(result.request, result.reason)

    def in_background(
        self, work: Coroutine[Any, Any, None] | Callable[[], Awaitable[None]], *, exclusive: bool = False
    ) -> None:
        """Run ``work`` (a poller, a subscription) from ``start`` until :meth:`stop_background`,
        which ``close`` calls before closing the clients the work uses. ``exclusive``: only while this
        process holds the lease ``poller:<name>`` among those sharing the store (replicas); ``work`` is
        then a function, called again each time the lease is taken back (``channels._exclusive``)."""
        from hitl_mcp.channels._exclusive import background

        self._background.append(background(self.hub, self.name, work, exclusive))

    async def stop_background(self) -> None:
        """Cancel what :meth:`in_background` started, and wait for it to end."""
        from hitl_mcp.channels._exclusive import stop

        await stop(self._background)

    async def ignore(self, request_id: str | None, actor: str | None, reason: str, **data: Any) -> None:
        """A reply not let through (a sender not allowed, a request closed, words not understood):
        one ``reply_ignored`` audit row, and a log line."""
        self.log.info("%s: ignored a reply from %s: %s", self.name, actor, reason)
        await self.hub.record(
            request_id, "reply_ignored", actor, {"channel": self.name, "reason": reason, **data}
        )

    # --- the protocol --------------------------------------------------------------------------

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

    def preview_room(self) -> Room | None:
        """How much of a preview this shows whole (``fitting``: else approved in the inbox); None: all."""
        return None

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

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """Remind the person of a request still waiting (an escalation ladder's ``remind`` step);
        ``delivery`` is what ``deliver`` returned for it, and ``key`` names this reminder (the same on
        a retry: a channel that sends "at most once" keeps its progress under it). By default the
        request is sent again, worded "Still waiting: ..."; a channel whose ``deliver`` sends each
        request only once, or that can reply to or edit its first message, overrides this."""
        from hitl_mcp.core.wording import still_waiting

        return await self.deliver(request.model_copy(update={"text": still_waiting(request.text)}))

    @property
    def retracts(self) -> bool:
        """Whether settling a request sends anything here; when not, no retraction is queued."""
        return type(self).retract is not Channel.retract

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Tell the person the request is settled (``request`` carries the outcome)."""
