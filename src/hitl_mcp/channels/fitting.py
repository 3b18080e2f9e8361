"""The kit's rule for previews: a channel offers Approve only for a preview it shows whole.

Each channel says how much of a preview it can show (:meth:`Channel.preview_room`: a :class:`Room`
in its own unit: Slack's characters, Telegram's UTF-16 units, ntfy's bytes; None: all of it, as the
inbox). :func:`shown` is what the channel shows of a request's preview: the whole text when it fits,
else its first lines, a summary and "+212 lines not shown". :func:`approve_here` is the one decision
every channel asks before it offers Approve, and the broker asks again when an approval comes in
(so a typed YES or a forged button cannot approve what was not shown): None when Approve may be
given on this channel, else why not, in words for the person ("review and approve it in the inbox").
Deny is always offered. Every channel words its buttons from these; none decides on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from hitl_mcp.core.models import Kind, Request
from hitl_mcp.core.previews import Shown, fit

__all__ = ["INBOX_ACTION", "Room", "approve_here", "measure", "shown"]

Unit = Literal["chars", "utf16", "bytes"]
#: the words of the link or button that takes an approval to the inbox
INBOX_ACTION = "Review and approve in the inbox"


@dataclass(frozen=True)
class Room:
    """How much of a preview a channel shows: ``size`` in ``unit``, counted on the text as the
    channel sends it (``escape``: HTML's or Slack's entities take room too)."""

    size: int
    unit: Unit = "chars"
    escape: Callable[[str], str] | None = None

    def measure(self, text: str) -> int:
        return measure(self.escape(text) if self.escape else text, self.unit)


class Shows(Protocol):
    """What the rule needs of a channel (``base.Channel`` has both)."""

    name: str

    def preview_room(self) -> Room | None: ...


def measure(text: str, unit: Unit) -> int:
    if unit == "utf16":
        return len(text.encode("utf-16-le")) // 2
    if unit == "bytes":
        return len(text.encode())
    return len(text)


def shown(channel: Shows, request: Request) -> Shown | None:
    """What ``channel`` shows of the request's preview (None: it has none)."""
    if request.preview is None:
        return None
    room = channel.preview_room()
    if room is None:
        return fit(request.preview, 1 << 62)
    return fit(request.preview, room.size, room.measure)


def approve_here(channel: Shows, request: Request) -> str | None:
    """None when an approval of ``request`` may be offered and given on ``channel``; else why not,
    for the person: the preview does not fit there, so it is approved in the inbox, below the
    whole preview."""
    if request.kind != Kind.APPROVAL:
        return None
    what = shown(channel, request)
    if what is not None and not what.whole:
        return (
            f"the preview is too long for {channel.name} ({what.note}): review and approve it in the "
            "hitl-mcp inbox, below the whole preview (you may deny it here)"
        )
    return None
