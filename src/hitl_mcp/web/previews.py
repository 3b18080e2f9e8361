"""A preview as the inbox draws it: HTML made on the server, highlighted by Pygments (no script).

- a diff: a file list when it changes more than one file, then each file's hunks as a table with the
  old and new line numbers; side by side on a wide screen, unified on a phone (CSS picks one);
- a command: the line, highlighted as shell, with its working directory;
- SQL: pretty-printed by sqlglot in its dialect, highlighted, with the statement exactly as sent;
- a table: a real table that scrolls sideways, never cut;
- JSON and Markdown: the text, highlighted.

Every character a reader could miss (a bidi override, a zero-width space) is marked on its line, as
the payload's are (``views.visible_payload``), and the highlighting of that line is left out.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from hitl_mcp.core import diffs
from hitl_mcp.core.previews import as_text, cell_text, summary
from hitl_mcp.web.views import visible_payload

if TYPE_CHECKING:
    from pygments.lexer import Lexer

__all__ = ["CARD_LINES", "INVISIBLE", "fits_card", "pretty_sql", "preview_html"]

#: a preview the inbox's list shows whole in its card, with Approve; a longer one is approved on its
#: own page, below the whole preview
CARD_LINES = 30

#: characters a reader cannot see: another space, a control, a zero-width or a bidi format character
INVISIBLE = re.compile(
    "[\u007f-\u00a0\u00ad\u061c\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064"
    "\u2066-\u206f\u3000\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]"
)


def preview_html(request: Any) -> Markup:
    """The request's preview (``Request.preview``) as HTML; empty when it has none."""
    preview = request.preview
    if not preview:
        return Markup("")
    kind = preview.get("kind")
    if kind == "diff":
        body = _diff(preview)
    elif kind == "command":
        body = _command(preview)
    elif kind == "sql":
        body = _sql(preview)
    elif kind == "table":
        body = _table(preview, request.id)
    elif kind == "json":
        text = json.dumps(preview.get("value"), indent=2, ensure_ascii=False, sort_keys=True)
        body = _block(text, _lexer("json"))
    else:
        body = _block(as_text(preview), _lexer("markdown"))
    return Markup('<div class="preview-body preview-{}">{}</div>').format(kind, body)


def fits_card(request: Any) -> bool:
    """Whether the list's card shows the whole preview (and so offers Approve there)."""
    if not request.preview:
        return True
    text = as_text(request.preview)
    return len(text) <= 3000 and text.count("\n") < CARD_LINES and request.preview.get("kind") != "table"


# --- highlighting -----------------------------------------------------------------------------------


@cache
def _lexer(name: str) -> Lexer:
    from pygments.lexers import get_lexer_by_name

    return get_lexer_by_name(name, stripnl=False, ensurenl=False)


def _lexer_for(path: str) -> Lexer | None:
    from pygments.lexers import get_lexer_for_filename
    from pygments.util import ClassNotFound

    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def _line(text: str, lexer: Lexer | None) -> Markup:
    """One line, highlighted (class names only: the page's CSS colours them, its policy has no inline
    style); a line with a character a reader could miss is marked instead."""
    if INVISIBLE.search(text):
        return visible_payload(text)
    if lexer is None or not text:
        return escape(text)
    from pygments import highlight
    from pygments.formatters import HtmlFormatter

    html = highlight(text, lexer, HtmlFormatter(nowrap=True, classprefix="tok-"))
    return Markup(html.rstrip("\n"))


def _block(text: str, lexer: Lexer | None) -> Markup:
    lines = Markup("\n").join(_line(line, lexer) for line in text.split("\n"))
    return Markup('<pre class="code" tabindex="0"><code>{}</code></pre>').format(lines)


# --- the kinds --------------------------------------------------------------------------------------


def _diff(preview: dict[str, Any]) -> Markup:
    files = preview.get("files", [])
    parts: list[Markup] = []
    if len(files) > 1:
        items = Markup("").join(
            Markup('<li><a href="#pf-{}">{}</a> <span class="stat">{}</span></li>').format(
                number, f["path"], _stat(f)
            )
            for number, f in enumerate(files)
        )
        parts.append(
            Markup('<nav class="file-list" aria-label="Files changed"><ol>{}</ol></nav>').format(items)
        )
    for number, entry in enumerate(files):
        parts.append(_file(number, entry))
    return Markup("").join(parts)


def _stat(entry: dict[str, Any]) -> str:
    status = {"added": "new file", "deleted": "deleted", "renamed": f"renamed from {entry.get('old_path')}"}
    said = status.get(entry.get("status", ""), "")
    return f"+{entry.get('added', 0)} −{entry.get('removed', 0)}" + (f" · {said}" if said else "")


def _file(number: int, entry: dict[str, Any]) -> Markup:
    head = Markup('<p class="file-head" id="pf-{}"><code>{}</code> <span class="stat">{}</span></p>').format(
        number, entry["path"], _stat(entry)
    )
    if entry.get("binary"):
        return head + Markup('<p class="muted">A binary file: its content is not shown.</p>')
    lexer = _lexer_for(entry["path"])
    lines = diffs.lines(entry)
    return head + _unified(lines, lexer, entry["path"]) + _split(lines, lexer, entry["path"])


_SIGN = {"added": "+", "removed": "−", "context": " ", "note": "", "hunk": ""}


def _unified(lines: list[diffs.Line], lexer: Lexer | None, path: str) -> Markup:
    rows = []
    for line in lines:
        if line.kind == "hunk":
            rows.append(Markup('<tr class="d-hunk"><td colspan="3">{}</td></tr>').format(line.text))
            continue
        rows.append(
            Markup(
                '<tr class="d-{}"><td class="ln">{}</td><td class="ln">{}</td><td class="dc">{}{}</td></tr>'
            ).format(
                line.kind,
                "" if line.old is None else line.old,
                "" if line.new is None else line.new,
                Markup('<span class="sign" aria-hidden="true">{}</span>').format(_SIGN[line.kind]),
                _said(line, lexer),
            )
        )
    return _diff_table("unified", path, Markup("").join(rows), ("Old line", "New line", "Change"))


def _said(line: diffs.Line, lexer: Lexer | None) -> Markup:
    """The line's text; a screen reader hears whether it is added or removed."""
    words = {"added": "added: ", "removed": "removed: "}.get(line.kind, "")
    label = Markup('<span class="sr-only">{}</span>').format(words) if words else Markup("")
    if line.kind == "note":
        return Markup('<span class="muted">{}</span>').format(line.text)
    return label + _line(line.text, lexer)


def _split(lines: list[diffs.Line], lexer: Lexer | None, path: str) -> Markup:
    """Side by side: removed lines on the left paired with the added lines that replace them."""
    rows: list[Markup] = []
    removed: list[diffs.Line] = []
    added: list[diffs.Line] = []

    def flush() -> None:
        for index in range(max(len(removed), len(added))):
            left = removed[index] if index < len(removed) else None
            right = added[index] if index < len(added) else None
            rows.append(Markup("<tr>{}{}</tr>").format(_half(left, lexer), _half(right, lexer)))
        removed.clear()
        added.clear()

    for line in lines:
        if line.kind == "removed":
            removed.append(line)
        elif line.kind == "added":
            added.append(line)
        else:
            flush()
            if line.kind == "hunk":
                rows.append(Markup('<tr class="d-hunk"><td colspan="4">{}</td></tr>').format(line.text))
            elif line.kind == "note":
                rows.append(Markup('<tr class="d-note"><td colspan="4">{}</td></tr>').format(line.text))
            else:
                rows.append(
                    Markup("<tr>{}{}</tr>").format(_half(line, lexer, "old"), _half(line, lexer, "new"))
                )
    flush()
    return _diff_table("split", path, Markup("").join(rows), ("Old line", "Before", "New line", "After"))


def _half(line: diffs.Line | None, lexer: Lexer | None, side: str = "") -> Markup:
    if line is None:
        return Markup('<td class="ln d-empty"></td><td class="dc d-empty"></td>')
    number = line.old if side == "old" or line.kind == "removed" else line.new
    return Markup('<td class="ln d-{}">{}</td><td class="dc d-{}">{}</td>').format(
        line.kind, "" if number is None else number, line.kind, _said(line, lexer)
    )


def _diff_table(view: str, path: str, rows: Markup, heads: tuple[str, ...]) -> Markup:
    header = Markup("").join(Markup('<th scope="col">{}</th>').format(h) for h in heads)
    name = f"{'Unified' if view == 'unified' else 'Side-by-side'} diff of {path}"
    return Markup(
        '<div class="diff-scroll diff-{}" tabindex="0" role="region" aria-label="{}">'
        '<table class="diff"><thead class="sr-only"><tr>{}</tr></thead><tbody>{}</tbody></table></div>'
    ).format(view, name, header, rows)


def _command(preview: dict[str, Any]) -> Markup:
    where = (
        Markup('<p class="cwd">in <code>{}</code></p>').format(preview["cwd"]) if preview.get("cwd") else ""
    )
    return Markup("{}{}").format(where, _block(preview["command"], _lexer("bash")))


def pretty_sql(statement: str, dialect: str | None) -> str | None:
    """The statement pretty-printed in its dialect, or None when sqlglot cannot read it."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        return ";\n\n".join(sqlglot.transpile(statement, read=dialect, write=dialect, pretty=True))
    except SqlglotError:
        return None


def _sql(preview: dict[str, Any]) -> Markup:
    statement, dialect = preview["statement"], preview.get("dialect")
    pretty = pretty_sql(statement, dialect)
    lexer = _lexer("sql")
    if pretty is None or pretty.strip() == statement.strip():
        return _block(statement, lexer)
    sent = Markup('<details class="as-sent"><summary>Exactly as sent</summary>{}</details>').format(
        _block(statement, lexer)
    )
    return _block(pretty, lexer) + sent


def _table(preview: dict[str, Any], request_id: str) -> Markup:
    columns, rows = preview["columns"], preview["rows"]
    head = Markup("").join(Markup('<th scope="col">{}</th>').format(c) for c in columns)
    body = Markup("").join(
        Markup("<tr>{}</tr>").format(Markup("").join(_cell(v) for v in row)) for row in rows
    )
    caption = preview.get("title") or summary(preview)
    return Markup(
        '<div class="table-scroll" tabindex="0" role="region" aria-labelledby="pc-{}">'
        '<table class="rows-table"><caption id="pc-{}">{}</caption><thead><tr>{}</tr></thead>'
        "<tbody>{}</tbody></table></div>"
    ).format(request_id, request_id, caption, head, body)


def _cell(value: Any) -> Markup:
    kind = "num" if isinstance(value, int | float) and not isinstance(value, bool) else "text"
    shown = visible_payload(cell_text(value)) if INVISIBLE.search(cell_text(value)) else cell_text(value)
    return Markup('<td class="c-{}">{}</td>').format(kind, shown)
