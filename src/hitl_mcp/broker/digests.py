"""Digests: a channel configured with ``digest: 15m`` gets the ``notify_user`` messages at level
``info`` together, one message per window, instead of one message each. Questions, approvals and
notifications at any other level go at once.

- **Windows are aligned to the clock** (counted from the Unix epoch, so in UTC): with ``digest: 15m``
  they close at :00, :15, :30 and :45. Every process sharing the store computes the same window
  without asking anyone, and a notification waits at most one window.
- **A held notification is an ordinary delivery row**, queued until its window closes
  (``Store.create``'s ``held_until``). The outbox claims the rows that are due under its lease, as it
  claims every row, and sends one channel's rows as one message: a notification like any other
  (:func:`compose`), which the channel renders as it renders every notification. A restart loses
  nothing (the rows wait in the store) and several processes send each digest once (one of them
  claims its rows).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

from hitl_mcp.channels.base import Channel
from hitl_mcp.core.models import Kind, Request, Status

#: the notifications listed in one digest; the rest are counted ("... and 4 more in the inbox")
LIST_LIMIT = 20
#: each one's line, at most
LINE_LIMIT = 300


def window(channel: Channel) -> float | None:
    """The channel's digest window in seconds, or None when it sends each notification at once."""
    seconds = channel.config.digest  # every channel's config (ChannelConfig) has one
    return float(seconds) if seconds else None


def digested(request: Request) -> bool:
    """Whether the request waits for a digest where there is one: only a notification at level info."""
    return request.kind == Kind.NOTIFICATION and request.level in (None, "info")


def window_end(at: float, seconds: float) -> float:
    """When the window holding the instant ``at`` closes (windows of ``seconds``, from the epoch)."""
    return (math.floor(at / seconds) + 1) * seconds


def held_until(request: Request, channels: Mapping[str, Channel]) -> dict[str, float]:
    """The request's channels that hold it for a digest, each with the time its window closes."""
    if not digested(request):
        return {}
    held = {}
    for name in request.channels:
        channel = channels.get(name)
        seconds = None if channel is None else window(channel)
        if seconds is not None:
            held[name] = window_end(request.created_at, seconds)
    return held


def title(count: int) -> str:
    return f"digest: {count} notification{'' if count == 1 else 's'}"


def compose(notes: Sequence[Request], channel: str, at: float) -> Request:
    """The digest of ``notes`` (oldest first) as one notification for ``channel``: titled "digest: 3
    notifications", one line per notification ("• 10:02 Build: all tests pass", UTC). It carries the newest
    note's id, so that a link or an id it shows leads to a real request, and the people the notes were
    addressed to (the outbox groups notes by them)."""
    notes = sorted(notes, key=lambda n: (n.created_at, n.id))
    clients = {n.client_name for n in notes}
    lines = [_line(n, several_clients=len(clients) > 1) for n in notes[:LIST_LIMIT]]
    if len(notes) > LIST_LIMIT:
        lines.append(f"… and {len(notes) - LIST_LIMIT} more in the inbox")
    newest = notes[-1]
    return Request(
        id=newest.id,
        kind=Kind.NOTIFICATION,
        status=Status.NOTIFIED,
        text="\n".join(lines),
        title=title(len(notes)),
        level="info",
        channels=[channel],
        client_name=newest.client_name if len(clients) == 1 else "several agents",
        to=newest.to,
        owner=newest.owner,
        created_at=at,
    )


def _line(note: Request, several_clients: bool) -> str:
    line = " ".join((f"{note.title}: {note.text}" if note.title else note.text).split())  # one line
    if several_clients:
        line = f"[{note.client_name or 'an agent'}] {line}"
    if len(line) > LINE_LIMIT:
        line = line[: LINE_LIMIT - 1] + "…"
    return f"• {time.strftime('%H:%M', time.gmtime(note.created_at))} {line}"
