"""What a stored row means: the fields a request keeps in its JSON ``body``, and the converters from a
row (``sqlite3.Row`` or ``asyncpg.Record``: both are read by column name) to the store's values.

Both engines have the same tables and columns, each named like the field it fills; their SQL stays
in each engine. JSON columns are text on both (decoded here). The one difference a converter sees:
flags (``approved``, ``won``, ``high_risk``) are booleans in PostgreSQL but integers 0/1 in SQLite,
so they are made ``bool`` here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hitl_mcp.core.audit import AuditRow
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.quorum import Vote
from hitl_mcp.core.store import CredentialRow, DeliveryRow, ReceiptRow, ReplyRow, RuleRow, StepRow

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")


class Row(Protocol):
    """A row as both engines return it: its values by column name."""

    def __getitem__(self, column: str, /) -> Any: ...

    def keys(self) -> Any: ...


#: a request's fields kept together in its ``body`` column (JSON), not in columns of their own
BODY_FIELDS = (
    "text",
    "title",
    "details",
    "context",
    "choices",
    "allow_free_text",
    "payload",
    "payload_sha256",
    "risk",
    "risk_reasons",
    "level",
    "default_answer",
    "channels",
    "client_name",
    "to",
    "approvals",
    "step_up",
)


def _flag(value: Any) -> bool:
    """A flag column: a boolean in PostgreSQL, 0/1 in SQLite."""
    return bool(value)


def request(row: Row) -> Request:
    approved = row["approved"]
    return Request(
        id=row["id"],
        kind=Kind(row["kind"]),
        status=Status(row["status"]),
        idempotency_key=row["idempotency_key"],
        session_key=row["session_key"],
        owner=row["owner"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        closed_at=row["closed_at"],
        answer=row["answer"],
        choice=row["choice"],
        approved=None if approved is None else _flag(approved),
        comment=row["comment"],
        responder=row["responder"],
        channel=row["channel"],
        person=row["person"],
        on_behalf_of=row["on_behalf_of"],
        votes=json.loads(row["votes"] or "[]"),
        receipt=row["receipt"],
        preview=None if row["preview"] is None else json.loads(row["preview"]),
        preview_sha256=row["preview_sha256"],
        **json.loads(row["body"]),
    )


def preview_json(request: Request) -> str | None:
    """The ``preview`` column's text."""
    return None if request.preview is None else json.dumps(request.preview, ensure_ascii=False)


def created(request: Request) -> dict[str, Any]:
    """The data of a request's ``created`` audit row: what was asked (``audit_replay`` replays it)."""
    data = {
        "kind": request.kind.value,
        "text": request.text,
        "channels": request.channels,
        "payload_sha256": request.payload_sha256,
        "expires_at": request.expires_at,
        "owner": request.owner,
    }
    if request.preview_sha256 is not None:  # only then: the rows of requests without one are unchanged
        data["preview_sha256"] = request.preview_sha256
    return data


def asked(data: Any) -> dict[str, Any]:
    """The hashes a request was asked with, from its ``created`` row's data (text, as stored)."""
    found = json.loads(data) if isinstance(data, str) else dict(data or {})
    return {k: found.get(k) for k in ("payload_sha256", "preview_sha256")}


@cache
def _names(cls: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _from_row(cls: type[D], row: Row, **decoded: Any) -> D:
    """A ``cls`` from the columns named like its fields, but for the ``decoded`` ones, given."""
    plain = {name: row[name] for name in _names(cls) if name not in decoded}
    return cls(**plain, **decoded)


def delivery(row: Row) -> DeliveryRow:
    return _from_row(DeliveryRow, row, detail=json.loads(row["detail"] or "{}"))


def step(row: Row) -> StepRow:
    return _from_row(StepRow, row, channels=json.loads(row["channels"]))


def reply(row: Row) -> ReplyRow:
    proof = row["proof"]
    return _from_row(ReplyRow, row, won=_flag(row["won"]), proof=None if proof is None else json.loads(proof))


def rule(row: Row) -> RuleRow:
    shown = row["shown"]
    return _from_row(
        RuleRow,
        row,
        arguments=json.loads(row["arguments"]),
        high_risk=_flag(row["high_risk"]),
        shown=None if shown is None else json.loads(shown),
    )


def credential(row: Row) -> CredentialRow:
    return _from_row(CredentialRow, row, data=json.loads(row["data"]))


def receipt(row: Row) -> ReceiptRow:
    return _from_row(ReceiptRow, row)


def votes_json(votes: Sequence[Vote]) -> str:
    """The ``votes`` column's text."""
    return json.dumps([v.model_dump(mode="json") for v in votes])


def audit_row(row: Row) -> AuditRow:
    if "chain" not in row.keys():  # SQLite's log: one chain, no columns for it
        return _from_row(AuditRow, row, data=json.loads(row["data"]), chain=0, written_at=None)
    return _from_row(AuditRow, row, data=json.loads(row["data"]))
