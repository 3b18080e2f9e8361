"""Text from agents and channels, made safe to print on a terminal: shown, never obeyed.

A request's text, choices, client name, answer and responder come from an agent or a remote
person. Printed raw, an escape sequence in them could hide text, rewrite the line above (so a
request reads as another), or write to the clipboard (OSC 52). :func:`visible` shows every control
character as an escape instead (``ESC`` as ``\\x1b``, a carriage return as ``\\r``) and the
invisible direction overrides (which reorder what the eye reads) as ``\\u202e``. ``--json`` output
needs none of this: ``json.dumps`` writes every such character as a ``\\u`` escape.
"""

from __future__ import annotations

import re

#: direction marks, embeddings, overrides and isolates (Trojan Source), and the Unicode line and
#: paragraph separators (some terminals break the line on them)
_INVISIBLE = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
#: C0 controls but tab and newline, DEL, C1 controls (0x9b is CSI: an escape on its own)
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r":
        return "\\r"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, newlines: bool = True) -> str:
    """``text`` with control characters shown as escapes; newlines kept unless ``newlines`` is false
    (then shown as ``\\n``, for text that must stay on one line)."""
    shown = _CONTROL.sub(_shown, str(text))
    return shown if newlines else shown.replace("\n", "\\n")


def block(text: object, indent: str) -> str:
    """Multi-line text for a listing: the first line as is, each further line under ``indent`` and
    a bar, so no line of the text can pass for a line of the listing itself."""
    first, *rest = visible(text).split("\n")
    return "\n".join([first, *(f"{indent}| {line}" for line in rest)])
