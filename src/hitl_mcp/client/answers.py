"""What the client returns: a request's :class:`Answer` (the server's ``Outcome``) and a notification's
:class:`Notified`; and the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "HitlError", "Notified", "Unreachable"]


class HitlError(Exception):
    """The server refused the call (a bad argument, an unknown channel, an idempotency key used for a
    different request...): its message says why, in one line."""


class Unreachable(HitlError):
    """The server could not be reached, or the connection broke and did not come back in time. A call
    made with an ``idempotency_key`` can be made again: it re-attaches to the same request."""


@dataclass(frozen=True)
class Answer:
    """A request as the server reports it (the tools' ``Outcome``). ``status`` is ``answered``,
    ``pending`` (nobody answered before the call's deadline: wait again with its ``request_id``),
    ``expired`` or ``cancelled``. An approval is given only when ``approved`` is true."""

    request_id: str
    status: str
    answer: str | None = None
    """The person's answer as text (the choice, for a choice)."""
    choice: str | None = None
    approved: bool | None = None
    comment: str | None = None
    responder: str | None = None
    """Who answered, as their channel knows them (``@sam (U0SAM)``)."""
    person: str | None = None
    """The person of the server's config who answered, when the responder is one."""
    channel: str | None = None
    asked_at: str | None = None
    answered_at: str | None = None
    payload_sha256: str | None = None
    next_step: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Everything the server returned (votes, rule, waited_seconds...)."""

    @property
    def settled(self) -> bool:
        """Whether the request is over: answered, expired or cancelled."""
        return self.status != "pending"

    @classmethod
    def from_outcome(cls, data: dict[str, Any]) -> Answer:
        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        approved = data.get("approved")
        return cls(
            request_id=str(data["request_id"]),
            status=str(data["status"]),
            answer=text("answer"),
            choice=text("choice"),
            approved=approved if isinstance(approved, bool) else None,
            comment=text("comment"),
            responder=text("responder"),
            person=text("person"),
            channel=text("channel"),
            asked_at=text("asked_at"),
            answered_at=text("answered_at"),
            payload_sha256=text("payload_sha256"),
            next_step=text("next_step") or "",
            raw=dict(data),
        )


@dataclass(frozen=True)
class Notified:
    """What ``notify_user`` did: the channels that took the message and those that failed (each a
    ``{"channel", "error"}``)."""

    request_id: str
    delivered: list[str]
    failed: list[dict[str, str]]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_result(cls, data: dict[str, Any]) -> Notified:
        return cls(
            request_id=str(data["request_id"]),
            delivered=[str(c) for c in data.get("delivered") or []],
            failed=[dict(f) for f in data.get("failed") or []],
            raw=dict(data),
        )
