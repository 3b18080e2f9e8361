"""One reply vocabulary for every text channel (SMS, email replies, and text channels to come).

A text reply to an approval starts with a yes or a no word; a question's choice may be given by its
number. The words are the same everywhere, so a person who answers "ok" by SMS can answer "ok" by mail.
Slack is not a text channel for approvals: there, an approval needs a button, and a thread reply
"yes" is not one.
"""

from __future__ import annotations

import re
from typing import Literal

#: the words that approve, matched case-insensitively as the first word of a reply
APPROVE_WORDS = frozenset({"yes", "y", "approve", "approved", "ok", "okay"})
#: the words that deny
DENY_WORDS = frozenset({"no", "n", "deny", "denied", "reject", "rejected"})
#: what may surround a keyword: "YES!", "(no)", "'ok'"
PUNCTUATION = ".,;:!?\"'()"

Decision = Literal["approve", "deny"]


def decision_of(word: str) -> Decision | None:
    """The decision a single word gives (``"OK!"`` approves), or None."""
    word = word.strip(PUNCTUATION).casefold()
    if word in APPROVE_WORDS:
        return "approve"
    if word in DENY_WORDS:
        return "deny"
    return None


def decision_pattern() -> str:
    """A regex group matching any yes or no word as a whole word (longest first, so ``approved`` is
    not read as ``approve`` + ``d``, and ``y'all`` or ``n/a`` is no word at all)."""
    words = sorted(APPROVE_WORDS | DENY_WORDS, key=len, reverse=True)
    return "(" + "|".join(map(re.escape, words)) + r")(?![\w'’/])"


def choice_by_number(text: str, choices: list[str] | None) -> str | None:
    """The choice a number names (1-based): ``"2"`` -> ``choices[1]``; None when it names none."""
    text = text.strip()
    if not choices or not text.isdigit():
        return None
    index = int(text)
    return choices[index - 1] if 1 <= index <= len(choices) else None
