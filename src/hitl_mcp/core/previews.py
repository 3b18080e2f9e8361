"""A preview: what an approval will do, shown as a person reads it (a diff, a command, SQL, a table,
JSON, Markdown), normalised, hashed and measured. No I/O.

``request_approval(preview=...)`` takes one of the ``*Preview`` models below (``kind`` says which);
:func:`normalise` makes it the one stored form (a plain JSON object, the same for the same content
however it was given: a diff given as files old/new is stored as the unified diff it makes), and
:func:`preview_sha256` hashes that form's canonical JSON, as ``payload_sha256`` hashes the payload.

:func:`as_text` is the preview as plain text, the form every channel but the inbox shows, and
:func:`fit` says whether it fits a channel's room whole: if not, the channel shows the first lines,
a summary ("+212 lines not shown") and no Approve (``channels.fitting``).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hitl_mcp.core import diffs
from hitl_mcp.core.models import canonical_json

__all__ = [
    "MAX_PREVIEW",
    "Preview",
    "PreviewError",
    "Shown",
    "as_text",
    "fit",
    "normalise",
    "preview_sha256",
    "summary",
]

#: the most a stored preview may take, as canonical JSON (a diff of a few thousand lines)
MAX_PREVIEW = 400_000
KINDS = ("diff", "command", "sql", "table", "json", "markdown")


class PreviewError(ValueError):
    """A preview that cannot be shown as given: one line that says why."""


Title = Annotated[str | None, Field(max_length=200, description="A short heading, e.g. 'Edit src/app.py'.")]
Cell = str | int | float | bool | None


class _Kind(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use (cold start)
    title: Title = None


class FileChange(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    path: str = Field(min_length=1, max_length=1000)
    old: str | None = Field(None, description="The file's content before (omit or null: a new file).")
    new: str | None = Field(None, description="The file's content after (omit or null: deleted).")


class DiffPreview(_Kind):
    """A change to files: a unified diff, or each file's content before and after."""

    kind: Literal["diff"]
    diff: str | None = Field(None, description="A unified diff (git diff or diff -u output).")
    files: list[FileChange] | None = Field(None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _one_form(self) -> DiffPreview:
        if (self.diff is None) == (self.files is None):
            raise ValueError("give one of diff (unified diff text) or files (path, old, new)")
        return self


class CommandPreview(_Kind):
    """A command to run: argv (a list) or a shell line, and where."""

    kind: Literal["command"]
    command: str | list[str] = Field(description="A shell line, or the argv list.")
    cwd: str | None = Field(None, max_length=1000, description="The working directory.")


class SqlPreview(_Kind):
    """SQL to run, in a dialect (postgres, mysql, sqlite, bigquery, snowflake, tsql...)."""

    kind: Literal["sql"]
    statement: str = Field(min_length=1)
    dialect: str | None = Field(None, max_length=40)


class TablePreview(_Kind):
    """Rows the action touches, e.g. "these 14 invoices"."""

    kind: Literal["table"]
    columns: list[str] = Field(min_length=1, max_length=100)
    rows: list[list[Cell]] = Field(max_length=10_000)


class JsonPreview(_Kind):
    kind: Literal["json"]
    value: Any


class MarkdownPreview(_Kind):
    """Text to send or publish (an email, a post, a comment), as Markdown."""

    kind: Literal["markdown"]
    text: str = Field(min_length=1)


Preview = Annotated[
    DiffPreview | CommandPreview | SqlPreview | TablePreview | JsonPreview | MarkdownPreview,
    Field(discriminator="kind"),
]


def normalise(preview: Any) -> dict[str, Any]:
    """The stored form of a preview (a model above, or its JSON); raises ``PreviewError``."""
    from pydantic import TypeAdapter, ValidationError

    try:
        given = TypeAdapter(Preview).validate_python(preview)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "kind"
        raise PreviewError(f"{where}: {str(first['msg'])[:1].lower()}{str(first['msg'])[1:]}") from None
    out: dict[str, Any] = {"kind": given.kind}
    match given:
        case DiffPreview(diff=str(text)):
            try:
                out["files"] = diffs.parse(text)
            except ValueError as exc:
                raise PreviewError(str(exc)) from None
        case DiffPreview(files=list(files)):
            out["files"] = [diffs.make(f.path, f.old, f.new) for f in files]
        case CommandPreview(command=list(argv)):
            if not argv or not all(argv):
                raise PreviewError("command: an argv list of non-empty words")
            out.update(command=shlex.join(argv), argv=list(argv))
        case CommandPreview(command=str(line)):
            if not line.strip():
                raise PreviewError("command: empty")
            out["command"] = line.strip()
        case SqlPreview(statement=statement, dialect=dialect):
            out.update(statement=statement.strip(), dialect=_dialect(dialect))
        case TablePreview(columns=columns, rows=rows):
            for number, row in enumerate(rows, 1):
                if len(row) != len(columns):
                    raise PreviewError(f"rows: row {number} has {len(row)} cells for {len(columns)} columns")
            out.update(columns=columns, rows=rows)
        case JsonPreview(value=value):
            out["value"] = value
        case MarkdownPreview(text=text):
            out["text"] = text
    if isinstance(given, CommandPreview) and given.cwd:
        out["cwd"] = given.cwd
    if given.title:
        out["title"] = given.title
    size = len(canonical_json(out))
    if size > MAX_PREVIEW:
        raise PreviewError(f"at most {MAX_PREVIEW:,} characters as JSON; this one has {size:,}")
    return out


def _dialect(name: str | None) -> str | None:
    if name is None:
        return None
    from sqlglot.dialects.dialect import Dialect

    key = name.strip().lower()
    if Dialect.get(key) is None:
        raise PreviewError(
            f"dialect: {name!r} is not a SQL dialect sqlglot knows (postgres, mysql, sqlite...)"
        )
    return key


def preview_sha256(preview: dict[str, Any] | None) -> str | None:
    """The SHA-256 of the stored form's canonical JSON (sorted keys, no spaces)."""
    if preview is None:
        return None
    return hashlib.sha256(canonical_json(preview).encode()).hexdigest()


# --- as a person reads it in plain text ---------------------------------------------------------


def as_text(preview: dict[str, Any]) -> str:
    """The whole preview as plain text (monospace): what chat, SMS and mail show."""
    kind = preview.get("kind")
    if kind == "diff":
        return "\n".join(diffs.as_text(f) for f in preview.get("files", []))
    if kind == "command":
        where = f"# in {preview['cwd']}\n" if preview.get("cwd") else ""
        return f"{where}$ {preview['command']}"
    if kind == "sql":
        return str(preview["statement"])
    if kind == "table":
        return _table_text(preview["columns"], preview["rows"])
    if kind == "json":
        return json.dumps(preview.get("value"), indent=2, ensure_ascii=False, sort_keys=True)
    return str(preview.get("text", ""))


def cell_text(value: Cell) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _table_text(columns: list[str], rows: list[list[Cell]]) -> str:
    table: list[list[Cell]] = [list(columns), *rows]
    texts = [[" ".join(cell_text(c).split()) for c in row] for row in table]
    widths = [max(len(row[i]) for row in texts) for i in range(len(columns))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in texts]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(preview: dict[str, Any]) -> str:
    """One line that says what the preview is, for a channel that cannot show it whole."""
    kind = preview.get("kind")
    lines = len(as_text(preview).splitlines())
    if kind == "diff":
        files = preview.get("files", [])
        added = sum(f.get("added", 0) for f in files)
        removed = sum(f.get("removed", 0) for f in files)
        names = ", ".join(f["path"] for f in files[:3]) + (
            f" and {len(files) - 3} more" if len(files) > 3 else ""
        )
        return f"Changes {_count(len(files), 'file')} (+{added} −{removed}): {names}"
    if kind == "command":
        where = f" in {preview['cwd']}" if preview.get("cwd") else ""
        return f"A command of {_count(lines, 'line')}{where}"
    if kind == "sql":
        dialect = f" ({preview['dialect']})" if preview.get("dialect") else ""
        return f"SQL{dialect}, {_count(lines, 'line')}"
    if kind == "table":
        return (
            f"A table of {_count(len(preview['rows']), 'row')} × {_count(len(preview['columns']), 'column')}"
        )
    if kind == "json":
        return f"JSON, {_count(lines, 'line')}"
    return f"Text, {_count(lines, 'line')}"


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# --- does it fit ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """What a channel with a limited room shows of a preview: all of it (``whole``), or its first
    ``text`` lines and ``hidden`` more, with the ``summary``."""

    whole: bool
    text: str
    summary: str
    hidden: int = 0

    @property
    def note(self) -> str:
        """ "+212 lines not shown" ("" when whole)."""
        return "" if self.whole else f"+{_count(self.hidden, 'line')} not shown"


def fit(preview: dict[str, Any], room: int, measure: Callable[[str], int] = len) -> Shown:
    """The preview as shown in ``room`` (as ``measure`` counts: characters, UTF-16 units, bytes):
    whole when its text fits, else the whole lines that fit and how many do not."""
    text = as_text(preview)
    about = summary(preview)
    if measure(text) <= room:
        return Shown(True, text, about)
    lines = text.splitlines()
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = measure(line) + 1
        if used + cost > room:
            break
        kept.append(line)
        used += cost
    return Shown(False, "\n".join(kept), about, len(lines) - len(kept))
