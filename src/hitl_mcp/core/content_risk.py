"""Risk read from what a preview shows, for when the agent did not say (or said less).

SQL is parsed with ``sqlglot`` (never matched with regexes): a ``DELETE`` or ``UPDATE`` without a
``WHERE`` (or with one that is always true), ``DROP``, ``TRUNCATE``, a dropped column, ``GRANT`` and
``REVOKE``. A command is tokenised with ``shlex``: ``rm`` recursive, ``sudo``, output piped into a
shell (``curl … | bash`` named as such), a ``>`` redirect over a file. Each flag says why, in words
a person reads beside the risk ("deletes every row of invoices"). The request's risk is the highest
of the agent's and the flags': raised, never lowered (:func:`raised`). No I/O.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hitl_mcp.core.models import Risk
from hitl_mcp.core.previews import normalise

__all__ = ["Flag", "assess", "command_flags", "prepare", "raised", "sql_flags"]

ORDER = {"low": 1, "medium": 2, "high": 3}
SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "ash"}
FETCHERS = {"curl", "wget"}
SEPARATORS = {"|", "||", "&&", ";", "&", "|&", ";;"}


@dataclass(frozen=True)
class Flag:
    risk: Risk
    reason: str


def raised(given: Risk | None, flags: list[Flag]) -> Risk | None:
    """The higher of the agent's risk and the flags' (None: neither says)."""
    levels: list[Risk] = [f.risk for f in flags] + ([given] if given is not None else [])
    return sorted(levels, key=_rank)[-1] if levels else None


def _rank(risk: Risk) -> int:
    return ORDER[risk]


def prepare(given: Any, risk: Risk | None) -> tuple[dict[str, Any], list[str] | None, Risk | None]:
    """A preview as an approval keeps it: its stored form (``previews.normalise``; raises
    ``PreviewError``), why its content raises the risk (None: it does not), and the risk raised."""
    preview = normalise(given)
    flags = assess(preview)
    return preview, [f.reason for f in flags] or None, raised(risk, flags)


def assess(preview: dict[str, Any] | None, exists: Callable[[str], bool] | None = None) -> list[Flag]:
    """The flags of a stored preview (``previews.normalise``); ``exists``, where the caller can look
    at the files a command names (the gate), limits redirect flags to files that exist."""
    if not preview:
        return []
    if preview.get("kind") == "sql":
        return sql_flags(preview["statement"], preview.get("dialect"))
    if preview.get("kind") == "command":
        argv = preview.get("argv")
        if argv is not None:
            return _simple_flags(list(argv), exists)
        return command_flags(preview["command"], exists)
    return []


# --- SQL --------------------------------------------------------------------------------------------


def sql_flags(statement: str, dialect: str | None = None) -> list[Flag]:
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        parsed = [s for s in sqlglot.parse(statement, read=dialect) if s is not None]
    except SqlglotError:
        return [Flag("medium", "the SQL could not be parsed, so it was not checked")]
    flags: list[Flag] = []
    for tree in parsed:
        table = _table(tree.find(exp.Table))
        if isinstance(tree, exp.Delete | exp.Update):
            where = tree.args.get("where")
            if where is None or _always(where.this):
                verb = "deletes" if isinstance(tree, exp.Delete) else "changes"
                flags.append(Flag("high", f"{verb} every row of {table}"))
        elif isinstance(tree, exp.Drop):
            flags.append(Flag("high", f"drops {_dropped(tree)}"))
        elif isinstance(tree, exp.TruncateTable):
            names = ", ".join(_table(t) for t in tree.expressions) or table
            flags.append(Flag("high", f"deletes every row of {names} (TRUNCATE)"))
        elif isinstance(tree, exp.Alter):
            for action in tree.args.get("actions") or []:
                if isinstance(action, exp.Drop):
                    flags.append(Flag("high", f"drops {_dropped(action)} from {table}"))
        elif isinstance(tree, exp.Grant | exp.Revoke):
            verb = "grants" if isinstance(tree, exp.Grant) else "revokes"
            flags.append(Flag("medium", f"{verb} privileges on {table}"))
    return flags


def _dropped(drop: Any) -> str:
    """``table s.x, y``, ``column c``, ``database prod``."""
    what = str(drop.args.get("kind") or "").lower()
    names = [n.sql() for n in drop.args.get("tables") or []] or ([drop.this.sql()] if drop.this else [])
    return " ".join(p for p in (what, ", ".join(names)) if p) or "an object"


def _table(node: Any) -> str:
    if node is None:
        return "a table"
    return str(node.sql()) if hasattr(node, "sql") else str(node)


def _always(condition: Any) -> bool:
    """A WHERE that holds for every row: TRUE, or a literal equal to itself (1 = 1)."""
    from sqlglot import exp

    if isinstance(condition, exp.Boolean):
        return bool(condition.this)
    if isinstance(condition, exp.EQ):
        left, right = condition.left, condition.right
        return isinstance(left, exp.Literal) and left == right
    return False


# --- commands ---------------------------------------------------------------------------------------


def command_flags(line: str, exists: Callable[[str], bool] | None = None) -> list[Flag]:
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return [Flag("medium", "the command could not be read as shell words, so it was not checked")]
    flags: list[Flag] = []
    simple: list[str] = []
    previous: list[str] = []
    piped = False
    for token in [*tokens, ";"]:
        if token not in SEPARATORS:
            simple.append(token)
            continue
        words = _redirects(simple, flags, exists)
        flags += _simple_flags(words, exists)
        program = _program(words)
        if piped and program in SHELLS:
            source = _program(previous)
            if source in FETCHERS:
                flags.append(
                    Flag("high", f"runs a script downloaded from the network ({source} … | {program})")
                )
            else:
                flags.append(Flag("high", f"pipes text into a shell to run (| {program})"))
        piped = token in ("|", "|&")
        previous, simple = words, []
    return _unique(flags)


def _redirects(words: list[str], flags: list[Flag], exists: Callable[[str], bool] | None) -> list[str]:
    """The words without their redirections; a ``>`` over a file is flagged."""
    kept: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word in (">", ">|", "&>") and index + 1 < len(words):
            target = words[index + 1]
            if kept and kept[-1].isdigit():
                kept.pop()  # 2> file: the descriptor goes with the redirection
            if target != "/dev/null" and not target.startswith("&") and (exists is None or exists(target)):
                flags.append(Flag("medium", f"writes over the file {target} (redirect >)"))
            index += 2
            continue
        if word in (">>", "<", "<<", "<<<", ">&", "<&") and index + 1 < len(words):
            index += 2
            continue
        kept.append(word)
        index += 1
    return kept


def _split(words: list[str]) -> tuple[str, list[str]]:
    """The program (its base name) and its arguments, past any ``FOO=1`` before it."""
    for index, word in enumerate(words):
        if "=" in word and not word.startswith("-") and word.split("=", 1)[0].isidentifier():
            continue
        return word.rsplit("/", 1)[-1], words[index + 1 :]
    return "", []


def _program(words: list[str]) -> str:
    return _split(words)[0]


def _simple_flags(words: list[str], exists: Callable[[str], bool] | None = None) -> list[Flag]:
    flags: list[Flag] = []
    program, rest = _split(words)
    if program in ("sudo", "doas"):
        flags.append(Flag("high", f"runs as another user, root by default ({program})"))
        index = 0
        while index < len(rest) and rest[index].startswith("-"):
            index += 2 if rest[index] in ("-u", "-g", "-C", "-h", "-p", "-U") else 1
        flags += _simple_flags(rest[index:], exists)
    elif program == "rm":
        short = "".join(w[1:] for w in rest if w.startswith("-") and not w.startswith("--"))
        recursive = "r" in short or "R" in short or "--recursive" in rest
        force = "f" in short or "--force" in rest
        targets = " ".join(w for w in rest if not w.startswith("-"))
        if recursive and force:
            flags.append(Flag("high", f"deletes recursively without asking (rm -rf {targets})"))
        elif recursive:
            flags.append(Flag("medium", f"deletes recursively (rm -r {targets})"))
    return flags


def _unique(flags: list[Flag]) -> list[Flag]:
    return list(dict.fromkeys(flags))
