"""Automatic previews: what a gated tool call will do, built from the call itself (never taken from
the agent's word), for the hooks and the proxy.

- Claude Code's ``Edit``, ``MultiEdit`` and ``Write``, the reference filesystem server's
  ``edit_file`` and ``write_file``, and Codex's ``apply_patch``: the edit is applied in memory to the
  file as it is on disk now, and the preview is the diff from one to the other;
- ``Bash`` (Claude Code, Codex) and ``run_shell_command`` (Gemini CLI): the command, in its cwd;
- a SQL tool's query (``query``, ``execute_sql``, ``read_query``... with a ``sql`` or ``query``
  argument): SQL;
- and whatever the policy file names for a tool: ``preview: {kind, argument, path?, dialect?}``.

A call whose preview cannot be built (its file is unreadable or too large, its ``old_string`` is not
in the file) gets none: the person still sees the exact payload, and the tool will fail on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hitl_mcp.gate.paths import lookup

__all__ = ["PreviewRule", "preview_for"]

#: the largest file a diff is computed from
MAX_FILE = 2 * 1024 * 1024
SHELL_TOOLS = {"Bash": "command", "run_shell_command": "command", "shell": "command"}
MARKERS = (("*** Add File: ", "add"), ("*** Delete File: ", "delete"), ("*** Update File: ", "update"))
SQL_TOOLS = {"query", "execute_sql", "run_sql", "read_query", "write_query", "execute_query", "sql"}


class PreviewRule(BaseModel):
    """A policy rule's ``preview``: which kind, and the argument (a path as in ``when``) holding it.
    For ``diff`` with ``path``: the argument holds the file's new content, and ``path`` names the
    argument holding the file's path (the diff is against the file on disk)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["diff", "command", "sql", "json", "markdown"]
    argument: str = Field(min_length=1, max_length=200)
    path: str | None = Field(default=None, max_length=200)
    dialect: str | None = Field(default=None, max_length=40)


def preview_for(
    tool: str, arguments: dict[str, Any], cwd: str | None = None, rule: PreviewRule | None = None
) -> dict[str, Any] | None:
    """The preview of this call (``request_approval``'s ``preview``), or None."""
    try:
        if rule is not None:
            return _by_rule(rule, arguments, cwd)
        return _known(tool, arguments, cwd)
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _known(tool: str, a: dict[str, Any], cwd: str | None) -> dict[str, Any] | None:
    if tool in ("Edit", "MultiEdit", "Write") and isinstance(a.get("file_path"), str):
        path = a["file_path"]
        old = _read(path, cwd)
        if tool == "Write":
            return _diff(path, old, str(a["content"]))
        edits = a["edits"] if tool == "MultiEdit" else [a]
        new = old or ""
        for edit in edits:
            new = _replaced(new, edit["old_string"], edit["new_string"], bool(edit.get("replace_all")))
        return _diff(path, old, new)
    if tool == "write_file" and isinstance(a.get("path"), str):
        return _diff(a["path"], _read(a["path"], cwd), str(a["content"]))
    if tool == "edit_file" and isinstance(a.get("path"), str):
        old = _read(a["path"], cwd)
        new = old or ""
        for edit in a["edits"]:
            new = _replaced(new, edit["oldText"], edit["newText"], False)
        return _diff(a["path"], old, new)
    if tool == "apply_patch":
        return _patch(_patch_text(a), cwd)
    if tool in SHELL_TOOLS and isinstance(a.get(SHELL_TOOLS[tool]), str | list):
        preview: dict[str, Any] = {"kind": "command", "command": a[SHELL_TOOLS[tool]]}
        where = a.get("cwd") or a.get("directory") or cwd
        if isinstance(where, str) and where:
            preview["cwd"] = where
        return preview
    if tool in SQL_TOOLS or tool.endswith(("_sql", "_query")):
        statement = a.get("sql", a.get("query"))
        if isinstance(statement, str) and statement.strip():
            return {"kind": "sql", "statement": statement}
    return None


def _by_rule(rule: PreviewRule, arguments: dict[str, Any], cwd: str | None) -> dict[str, Any] | None:
    found, value = lookup(arguments, rule.argument)
    if not found:
        return None
    if rule.kind == "diff" and rule.path is not None:
        has_path, path = lookup(arguments, rule.path)
        return _diff(str(path), _read(str(path), cwd), str(value)) if has_path else None
    if rule.kind == "diff":
        return {"kind": "diff", "diff": str(value)}
    if rule.kind == "command":
        return {"kind": "command", "command": value if isinstance(value, list) else str(value)}
    if rule.kind == "sql":
        return {"kind": "sql", "statement": str(value), "dialect": rule.dialect}
    if rule.kind == "markdown":
        return {"kind": "markdown", "text": str(value)}
    return {"kind": "json", "value": value}


# --- files ------------------------------------------------------------------------------------------


def _file(path: str, cwd: str | None) -> Path:
    file = Path(path).expanduser()
    return file if file.is_absolute() or cwd is None else Path(cwd) / file


def _read(path: str, cwd: str | None) -> str | None:
    """The file's text now (None: it does not exist). Raises for one too large or not text."""
    file = _file(path, cwd)
    if not file.exists():
        return None
    if file.stat().st_size > MAX_FILE:
        raise ValueError("too large to preview")
    return file.read_bytes().decode("utf-8")


def _replaced(text: str, old: str, new: str, every: bool) -> str:
    if old == "" and text == "":
        return new
    if old not in text:
        raise ValueError("old_string is not in the file")
    return text.replace(old, new) if every else text.replace(old, new, 1)


def _diff(path: str, old: str | None, new: str) -> dict[str, Any]:
    return {"kind": "diff", "files": [{"path": path, "old": old, "new": new}]}


# --- Codex's apply_patch ----------------------------------------------------------------------------


def _patch_text(a: dict[str, Any]) -> str:
    for key in ("input", "patch"):
        if isinstance(a.get(key), str):
            return str(a[key])
    command = a.get("command")
    if isinstance(command, list) and command and isinstance(command[-1], str):
        return command[-1]  # ["apply_patch", "*** Begin Patch ..."]
    raise ValueError("no patch")


def _patch(text: str, cwd: str | None) -> dict[str, Any] | None:
    """Codex's patch format (``*** Begin Patch``, ``*** Add File:``, ``*** Update File:`` with ``@@``
    hunks, ``*** Delete File:``, ``*** Move to:``) applied to the files on disk."""
    files: list[dict[str, Any]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        for marker, action in (
            ("*** Add File: ", "add"),
            ("*** Delete File: ", "delete"),
            ("*** Update File: ", "update"),
        ):
            if not line.startswith(marker):
                continue
            path = line[len(marker) :].strip()
            body: list[str] = []
            while index < len(lines) and not lines[index].startswith("*** "):
                body.append(lines[index])
                index += 1
            target = path
            if action == "update" and index < len(lines) and lines[index].startswith("*** Move to: "):
                target = lines[index][len("*** Move to: ") :].strip()
                index += 1
                while index < len(lines) and not lines[index].startswith("*** "):
                    body.append(lines[index])
                    index += 1
            if action == "add":
                files.append({"path": path, "old": None, "new": "".join(b[1:] + "\n" for b in body)})
            elif action == "delete":
                files.append({"path": path, "old": _read(path, cwd) or "", "new": None})
            else:
                old = _read(path, cwd) or ""
                files.append({"path": target, "old": old, "new": _hunks(old, body)})
    return {"kind": "diff", "files": files} if files else None


def _hunks(old: str, body: list[str]) -> str:
    """The file after the patch's hunks: each hunk's context and removed lines, found in order, give
    way to its context and added lines."""
    text = old.splitlines()
    out: list[str] = []
    at = 0
    hunks: list[list[str]] = [[]]
    for line in body:
        if line.startswith("@@"):
            hunks.append([])
        elif line != "*** End of File":
            hunks[-1].append(line)
    for hunk in (h for h in hunks if h):
        before = [h[1:] for h in hunk if h[:1] in (" ", "-", "")]
        after = [h[1:] for h in hunk if h[:1] in (" ", "+", "")]
        found = next(
            (i for i in range(at, len(text) - len(before) + 1) if text[i : i + len(before)] == before), None
        )
        if found is None:
            raise ValueError("a hunk does not match the file")
        out += text[at:found] + after
        at = found + len(before)
    out += text[at:]
    return "\n".join(out) + ("\n" if old.endswith("\n") or not old else "")
