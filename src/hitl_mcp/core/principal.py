"""Who calls: a principal is what a credential proved, never a name a client declared.

- **stdio**: the host that spawned the process (whoever can start it as this OS user can read the
  state directory anyway). Its ``clientInfo.name`` tells one host from another on a shared
  database, prefixed with ``server.agent`` when the config sets one.
- **agent**: an agent token (config ``agents:``, or ``hitl-mcp agent add``), over HTTP.
- **operator**: the web token, over HTTP: the person who runs the server.
- **oauth**: an OAuth access token (issuer, subject, client), over HTTP.

A request belongs to the principal that asked (``Request.owner`` holds ``Principal.owner``): only it
can re-attach, wait on, list or cancel it. ``clientInfo.name`` stays a display label.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

PrincipalKind = Literal["stdio", "agent", "operator", "oauth"]
KINDS: tuple[PrincipalKind, ...] = ("stdio", "agent", "operator", "oauth")

OPERATOR = "operator"
#: what an agent may be called: it is typed in commands and shown in the inbox
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: the ASGI scope key the HTTP credential check puts the principal under, for the tools to read
PRINCIPAL_KEY = "hitl.principal"
#: the kind of stored credential (``store.base.CredentialRow``) an agent token is
AGENT_CREDENTIAL = "agent"
#: the scope every credential that may use the tools carries (OAuth: what a token must be granted)
ASK_SCOPE = "hitl:ask"
#: between the parts of an OAuth principal's name (who, subject, client, issuer)
OAUTH_SEPARATOR = "|"


@dataclass(frozen=True)
class Principal:
    kind: PrincipalKind
    name: str = ""
    """stdio: the host's label; agent: the agent's name; oauth: issuer, subject and client; operator: ""."""

    @property
    def owner(self) -> str:
        """What a request it asks is owned by (``Request.owner``, a rule's ``agent``)."""
        return OPERATOR if self.kind == "operator" else f"{self.kind}:{self.name}"

    @property
    def label(self) -> str:
        """For a person: "agent ci-bot", "the operator", "claude-code (stdio)"."""
        if self.kind == "operator":
            return "the operator"
        if self.kind == "stdio":
            return f"{self.name} (stdio)"
        if self.kind == "oauth":
            return f"{self.name.split(OAUTH_SEPARATOR, 1)[0]} via OAuth"
        return f"{self.kind} {self.name}"

    @classmethod
    def stdio(cls, client_name: str | None, agent: str | None = None) -> Principal:
        name = client_name or "(unnamed client)"
        return cls("stdio", f"{agent}/{name}" if agent else name)

    @classmethod
    def operator(cls) -> Principal:
        return cls("operator")

    @classmethod
    def agent(cls, name: str) -> Principal:
        return cls("agent", name)

    @classmethod
    def oauth(cls, issuer: str, subject: str, client: str, person: str | None = None) -> Principal:
        """An OAuth access token's: who (the person of ``people:`` its subject maps to, else the
        subject), then the subject, the client and the issuer: the three that identify it."""
        return cls("oauth", OAUTH_SEPARATOR.join((person or subject, subject, client, issuer)))


def of_owner(owner: str) -> Principal:
    """The principal an owner string names (what ``Principal.owner`` wrote)."""
    if owner == OPERATOR:
        return Principal.operator()
    kind, sep, name = owner.partition(":")
    for known in KINDS:
        if sep and kind == known and known != "operator":
            return Principal(known, name)
    return Principal("stdio", owner)  # a row from before principals: its client's name


def owner_label(owner: str, client_name: str | None) -> str:
    """How the inbox names who asked: the principal, and the client it used when that says more."""
    principal = of_owner(owner)
    if principal.kind == "stdio":
        return principal.name
    if client_name and client_name != principal.name:
        return f"{client_name} ({principal.label})"
    return principal.label


def check_agent_name(name: str) -> str:
    """An agent's name, or ``ValueError`` saying what would be valid."""
    if not AGENT_NAME.fullmatch(name):
        raise ValueError(
            f"{printable(name)!r} is not an agent name: 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def token_digest(token: str) -> str:
    """What is kept of a bearer token: its SHA-256 (a token is 256 random bits: no salt needed)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def printable(text: str) -> str:
    """``text`` with control characters and lone surrogates shown as escapes, for messages."""
    return "".join(
        c if unicodedata.category(c) not in ("Cc", "Cs", "Cf") else f"\\u{ord(c):04x}" for c in text
    )
