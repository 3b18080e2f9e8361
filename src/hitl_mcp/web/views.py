"""What the inbox pages show, as plain functions over requests: no I/O, so each is easy to test."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.principal import of_owner
from hitl_mcp.core.wording import fate

HISTORY_STATUSES = (Status.ANSWERED, Status.EXPIRED, Status.CANCELLED)
HISTORY_KINDS = (Kind.QUESTION, Kind.APPROVAL)


def ago(ts: float | None, now: float) -> str:
    if ts is None:
        return ""
    seconds = max(0.0, now - ts)
    if seconds < 45:
        return "just now"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min ago"
    hours = round(seconds / 3600)
    if hours < 48:
        return f"{hours} h ago"
    return f"{round(seconds / 86400)} d ago"


def time_left(expires_at: float | None, now: float) -> str:
    if expires_at is None:
        return "no expiry"
    seconds = expires_at - now
    if seconds <= 0:
        return "expiring"
    if seconds < 60:
        return f"{int(seconds)} s left"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min left"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {rest:02d} min left" if rest else f"{hours} h left"
    return f"{round(seconds / 86400)} d left"


def expires_soon(expires_at: float | None, now: float) -> bool:
    return expires_at is not None and expires_at - now < 300


def clock(ts: float | None) -> str:
    """An absolute time for people (the page rewrites it in the reader's own zone)."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty_json(value: Any) -> str:
    """The payload as the person should read it: sorted keys, like the canonical form that is hashed."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


_SPACE_LIKE = " \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
# A run of two or more spaces that is not indentation (pretty JSON puts spaces after a newline only
# to indent; inside a string a newline is written \n, so any other run is in a value), or one
# character a reader cannot see: another space, a control, a zero-width or bidi format character.
_HIDDEN = re.compile(
    rf"(?<=[^\n ])[{_SPACE_LIKE}]{{2,}}"
    "|[\u007f-\u00a0\u00ad\u061c\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064"
    "\u2066-\u206f\u3000\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]"
)


def visible_payload(text: str) -> Markup:
    """The payload text, escaped, with what a reader could miss marked: each run of spaces in a value
    (``120 spaces``) and each invisible character (``U+202E``). The marks are drawn by CSS from
    attributes, so the characters on the page, and what is copied from it, are exactly ``text``."""
    out: list[str] = []
    last = 0
    for match in _HIDDEN.finditer(text):
        out.append(escape(text[last : match.start()]))
        found = match.group()
        if len(found) > 1:
            others = sorted({f"U+{ord(c):04X}" for c in found if c != " "})
            badge = f"{len(found)} spaces" + (f" incl. {' '.join(others)}" if others else "")
            title = f"{len(found)} spaces in a row" + (
                f", some of them {', '.join(others)}" if others else ""
            )
        else:
            badge = f"U+{ord(found):04X}"
            title = f"{badge} {unicodedata.name(found, 'invisible character').lower()}"
        out.append(Markup('<span class="ws" data-ws="{}" title="{}">{}</span>').format(badge, title, found))
        last = match.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


def agent_name(request: Request) -> str:
    return request.client_name or "unknown agent"


def session_label(session_key: str | None) -> str:
    """A short, stable tag for an MCP session, without showing its id."""
    if not session_key:
        return ""
    return hashlib.sha256(session_key.encode()).hexdigest()[:6]


def agent_label(request: Request) -> str:
    """Whom the request was asked as, beside its client's name: over HTTP the principal ("agent
    ci-bot", "the operator"); over stdio ``server.agent`` (the part of its owner before the client's
    name), or ``""``."""
    principal = of_owner(request.owner)
    if principal.kind != "stdio":
        return principal.label
    suffix = "/" + (request.client_name or "(unnamed client)")
    return principal.name[: -len(suffix)] if principal.name.endswith(suffix) else ""


@dataclass
class AgentGroup:
    agent: str
    label: str
    requests: list[Request] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.label}/{self.agent}" if self.label else self.agent


def agent_groups(requests: Iterable[Request]) -> list[AgentGroup]:
    """Newest first, grouped by agent: its client name and the agent label it asked under, so that an
    agent that reconnects (a new MCP session) stays one group. The group with the newest request first."""
    groups: dict[tuple[str, str], AgentGroup] = {}
    for request in sorted(requests, key=lambda r: r.created_at, reverse=True):
        key = (agent_name(request), agent_label(request))
        if key not in groups:
            groups[key] = AgentGroup(*key)
        groups[key].requests.append(request)
    return list(groups.values())


def outcome_line(request: Request) -> str:
    """The outcome in a few words, e.g. 'Approved by operator via web' (``wording.fate``)."""
    if request.status == Status.NOTIFIED:
        return "Notification"
    line = fate(request)
    return line[:1].upper() + line[1:]


def already_line(request: Request) -> str:
    """Why a late answer changed nothing: who settled the request, how and when."""
    if request.status == Status.NOTIFIED:
        return "A notification takes no answer."
    return f"Already {fate(request, when=f' at {clock(request.closed_at)}')}."


@dataclass(frozen=True)
class HistoryFilter:
    """The history page's search: free text, kind, status and agent (empty means any)."""

    q: str = ""
    kind: str = ""
    status: str = ""
    agent: str = ""

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> HistoryFilter:
        kind = params.get("kind", "")
        status = params.get("status", "")
        return cls(
            q=params.get("q", "").strip()[:200],
            kind=kind if kind in {k.value for k in HISTORY_KINDS} else "",
            status=status if status in {s.value for s in HISTORY_STATUSES} else "",
            agent=params.get("agent", "").strip()[:200],
        )

    @property
    def active(self) -> bool:
        return bool(self.q or self.kind or self.status or self.agent)

    def matches(self, request: Request) -> bool:
        if request.status not in HISTORY_STATUSES or request.kind not in HISTORY_KINDS:
            return False
        if self.kind and request.kind.value != self.kind:
            return False
        if self.status and request.status.value != self.status:
            return False
        if self.agent and agent_name(request) != self.agent:
            return False
        if self.q:
            haystack = " ".join(
                str(part)
                for part in (
                    request.id,
                    request.text,
                    request.title,
                    request.details,
                    request.context,
                    request.answer,
                    request.comment,
                    request.responder,
                    request.channel,
                    agent_name(request),
                )
                if part
            ).casefold()
            return all(word in haystack for word in self.q.casefold().split())
        return True
