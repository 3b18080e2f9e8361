"""Reading an answer out of a reply mail: no I/O, no state.

Three steps, each a function:

- :func:`auto_reply_reason`: out-of-office notes, bounces and list mail are never answers;
- :func:`reply_text`: the new text of a reply, without the quoted history (Gmail's "On ... wrote:",
  Outlook's "From: / Sent:" block, Apple Mail's "> " quoting) and without the signature;
- :func:`read_answer`: the first line decides, in the words every text channel shares
  (``channels._replies``: APPROVE, YES or OK approves, DENY, NO or REJECTED denies); a choice is picked
  by its number or its word; anything else is free text (where the question takes it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.message import EmailMessage, Message
from html.parser import HTMLParser
from typing import Literal

from hitl_mcp.channels._replies import choice_by_number, decision_of, decision_pattern

_AUTO_HEADERS = ("X-Autoreply", "X-Autorespond", "X-Autoresponder", "X-Auto-Reply")
_BULK_PRECEDENCE = {"bulk", "junk", "list", "auto_reply"}
_AUTO_SUBJECTS = (
    "auto:",
    "automatic reply",
    "autoreply",
    "auto-reply",
    "auto reply",
    "out of office",
    "out of the office",
    "abwesenheitsnotiz",
    "réponse automatique",
    "respuesta automática",
)
# what follows the keyword on the first line before the comment: "APPROVE - looks good", "no: not now"
_SEPARATOR = r"[\s.,:;!\-–—]*"


# ------------------------------------------------------------------------------------ auto-replies


def auto_reply_reason(msg: Message) -> str | None:
    """Why this mail is an automatic one (and so never an answer), or None for a person's mail."""
    auto = str(msg.get("Auto-Submitted", "")).strip().lower()
    if auto and auto != "no":
        return f"Auto-Submitted: {auto}"
    for name in _AUTO_HEADERS:
        if msg.get(name) is not None:
            return f"{name} header"
    precedence = str(msg.get("Precedence", "")).strip().lower()
    if precedence in _BULK_PRECEDENCE:
        return f"Precedence: {precedence}"
    if msg.get("List-Id") is not None or msg.get("List-Unsubscribe") is not None:
        return "mailing list mail"
    return_path = msg.get("Return-Path")
    if return_path is not None and str(return_path).strip() in ("<>", ""):
        return "a bounce (empty Return-Path)"
    if msg.get_content_type() == "multipart/report":
        return "a delivery report"
    subject = str(msg.get("Subject", "")).strip().lower()
    if subject.startswith(_AUTO_SUBJECTS):
        return "an automatic-reply subject"
    return None


# ------------------------------------------------------------------------------------- reply text


def reply_text(msg: EmailMessage) -> str:
    """The new text of a reply: the plain part (else the HTML part as text), quotes and signature cut."""
    part = msg.get_body(preferencelist=("plain", "html"))
    if part is None or not isinstance(part, EmailMessage):
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError):  # an unknown charset: read it as UTF-8 with replacements
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    if part.get_content_subtype() == "html":
        content = html_to_text(content)
    return strip_quoted(content)


def strip_quoted(text: str) -> str:
    """Cut the quoted history and the signature from a reply's text."""
    from mailparser_reply.constants import MAIL_LANGUAGES
    from mailparser_reply.parser import EmailMessage as ParsedMail

    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "").replace("\xa0", " ")
    parsed = ParsedMail(text=text, languages=list(MAIL_LANGUAGES), keep_hyphen_lists=True).read()
    # the first non-empty fragment is the newest text (a bottom-posted reply starts with its header)
    body = next((r.body for r in parsed.replies if r.body.strip()), "")
    lines = [line.rstrip() for line in body.split("\n") if not line.lstrip().startswith(">")]
    return "\n".join(lines).strip()


class _TextExtractor(HTMLParser):
    """HTML to plain text, leaving out quoted history (blockquotes, Gmail and Outlook quote blocks)."""

    _BLOCK = frozenset({"p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "table", "hr"})
    _SKIP = frozenset({"style", "script", "head", "title", "blockquote"})
    _VOID = frozenset({"br", "hr", "img", "meta", "link", "input", "wbr", "col", "area", "base", "source"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self._stack: list[bool] = []  # per open element: whether it hides its content
        self._done = False

    def _hidden(self) -> bool:
        return any(self._stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v or "") for k, v in attrs}
        if tag == "div" and (
            a.get("id") in ("appendonsend", "divRplyFwdMsg") or "gmail_quote" in a.get("class", "").split()
        ):
            self._done = True  # Outlook and Gmail put the quoted history after these
        if tag in self._BLOCK and not self._hidden():
            self.out.append("\n")
        if tag not in self._VOID:
            self._stack.append(tag in self._SKIP)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._VOID:
            return
        if self._stack:
            self._stack.pop()
        if tag in self._BLOCK and not self._hidden():
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._done and not self._hidden():
            self.out.append(data)


def html_to_text(markup: str) -> str:
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    text = "".join(parser.out)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(line.strip() for line in text.split("\n"))).strip()


# ------------------------------------------------------------------------------------ the answer


class Unreadable(ValueError):
    """The reply's first line gives no answer; the message says what would be read."""


@dataclass(frozen=True)
class Answer:
    decision: Literal["approve", "deny"] | None = None
    choice: str | None = None
    text: str | None = None
    comment: str | None = None


def _join(*parts: str) -> str | None:
    text = "\n".join(p.strip() for p in parts if p and p.strip())
    return text or None


def read_answer(
    text: str, *, approval: bool, choices: list[str] | None = None, allow_free_text: bool = True
) -> Answer:
    """The answer in a reply's text (already stripped of quotes). The first non-empty line decides;
    the rest of that line and the lines below become the comment (or, for free text, the answer)."""
    lines = text.strip().split("\n")
    first, rest = lines[0].strip(), "\n".join(lines[1:]).strip()
    if not first:
        raise Unreadable("the reply is empty")
    if approval:
        m = re.match(rf"^[*_\s]*{decision_pattern()}[*_]*{_SEPARATOR}(.*)$", first, re.IGNORECASE)
        decision = decision_of(m.group(1)) if m is not None else None
        if m is None or decision is None:
            raise Unreadable("the first line should be APPROVE or DENY (or YES or NO)")
        return Answer(decision=decision, comment=_join(m.group(2), rest))
    options = choices or []
    if options:
        m = re.match(rf"^#?(\d+)(?:[.)]|{_SEPARATOR}$|\s+)(.*)$", first)
        chosen = choice_by_number(m.group(1), options) if m is not None else None
        if m is not None and chosen is not None:
            return Answer(choice=chosen, comment=_join(m.group(2), rest))
        bare = first.rstrip(".!").strip()
        for option in options:
            if bare.casefold() == option.casefold():
                return Answer(choice=option, comment=_join(rest))
        for option in sorted(options, key=len, reverse=True):  # "prod please": the longest choice first
            m = re.match(rf"^{re.escape(option)}(?:{_SEPARATOR}\s|[.,:;!]){_SEPARATOR}(.*)$", first, re.I)
            if m is not None:
                return Answer(choice=option, comment=_join(m.group(1), rest))
        if not allow_free_text:
            listed = ", ".join(f"{i}. {c}" for i, c in enumerate(options, 1))
            raise Unreadable(f"the first line should be one of the choices, by number or word: {listed}")
    return Answer(text=_join(first, rest))
