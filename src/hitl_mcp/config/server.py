"""The ``server:`` section: where it listens, where it keeps state, and the store, audit and CLI
settings; and ``agents:``, the credentials agents present over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, SecretStr, field_validator
from pydantic_core import PydanticCustomError

from hitl_mcp.config.section import Section, reject_bool
from hitl_mcp.core.durations import bounded
from hitl_mcp.kit.state_key import StateKey

#: the shortest agent token the config accepts: 128 bits as URL-safe base64 (what `agent add` makes is 256)
MIN_TOKEN = 22


class HttpConfig(Section):
    host: str = Field(default="127.0.0.1", min_length=1)
    port: Annotated[int, BeforeValidator(reject_bool), Field(ge=1, le=65535)] = 8765
    max_body_bytes: Annotated[int, BeforeValidator(reject_bool), Field(ge=1024, le=64 * 1024 * 1024)] = (
        1024 * 1024
    )
    """Request bodies larger than this are refused with 413 before anything reads them."""
    header_timeout: Annotated[float, bounded(1, 300)] = 10.0
    """A connection that has not sent its request line and headers within this is closed."""


def _http_url(value: Any, example: str) -> Any:
    """An http(s) URL with a host, or the error that says so (without the value: it may hold a secret)."""
    if not isinstance(value, str):
        return value  # the type's own validation reports it
    try:
        parts = urlsplit(value.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a bad port or IPv6 address
        ok = False
    if not ok:
        raise PydanticCustomError(
            "url", "expected an http:// or https:// URL such as {example}", {"example": example}
        )
    return value.strip()


class AuditAnchorConfig(Section):
    """Where the audit chain's head goes besides ``audit.anchor`` in the state directory."""

    syslog: bool | str = False
    """``true``: the local syslog socket; a socket path; or ``host:port`` (UDP)."""
    url: SecretStr | None = None
    """Each anchor is POSTed here as JSON, from a thread: a failure never holds up a settle."""

    @field_validator("syslog", mode="before")
    @classmethod
    def _check_syslog(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.startswith("/"):
            host, _, port = value.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise PydanticCustomError(
                    "syslog",
                    "expected true, a socket path such as /dev/log, or host:port such as loghost:514",
                )
        return value

    @field_validator("url", mode="before")
    @classmethod
    def _check_url(cls, value: Any) -> Any:
        return None if value in (None, "") else _http_url(value, "https://logs.example.com/hitl-anchor")


class CliConfig(Section):
    require_token: bool = False
    """The answering verbs (answer, approve, deny) go through the running server's HTTP API with the
    web token instead of writing the database; see docs/security-audit.md for when that separates
    anything."""


class ServerConfig(Section):
    http: HttpConfig = Field(default_factory=HttpConfig)
    public_url: str | None = None
    """The base URL at which webhooks reach this server; stored without a trailing slash."""
    state_dir: Path | None = None
    store: str = "sqlite"
    """``sqlite`` (the embedded database in the state directory), or a ``postgresql://`` URL for a
    database shared by replicas; ``$HITL_DATABASE_URL``, when set, overrides it (store/select.py)."""
    store_pool: Annotated[int, Field(ge=1, le=500)] = 10
    """At most this many connections to PostgreSQL in each process's pool (besides its LISTEN
    connection and one per lease)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    agent: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    """An identity for the agent this server serves. A request belongs to the client that asked:
    this, with the MCP client's ``clientInfo.name``."""
    audit_anchor: AuditAnchorConfig = Field(default_factory=AuditAnchorConfig)
    cli: CliConfig = Field(default_factory=CliConfig)
    request_state_key: StateKey = None
    receipt_key: SecretStr | None = None
    """The Ed25519 key that signs receipts (32 bytes, base64url: ``hitl-mcp receipt key`` makes one);
    ``$HITL_RECEIPT_KEY`` too; else one made in the state directory. Each replica signs with its own
    or a shared one; every key used is published at ``/.well-known/jwks.json``."""
    """Seals 2026-07-28 round-trip state, the same on every replica (``state_key.py``)."""

    @field_validator("public_url", mode="before")
    @classmethod
    def _check_public_url(cls, value: Any) -> Any:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            return value  # the str validation reports it
        try:
            parts = urlsplit(value.strip())
            ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
            ok = ok and not parts.query and not parts.fragment
        except ValueError:  # a bad port or IPv6 address
            ok = False
        if not ok:
            raise PydanticCustomError(
                "url", "expected an http:// or https:// base URL such as https://hitl.example.com"
            )
        return value.strip().rstrip("/")

    @field_validator("state_dir", mode="before")
    @classmethod
    def _empty_state_dir(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("store", mode="before")
    @classmethod
    def _check_store(cls, value: Any) -> Any:
        if not isinstance(value, str) or value == "sqlite":
            return value
        try:
            parts = urlsplit(value.strip())
            ok = parts.scheme in ("postgresql", "postgres") and bool(parts.netloc or parts.path)
            parts.port  # noqa: B018 (raises on a bad port)
        except ValueError:
            ok = False
        if not ok:
            # no "got": a store URL may carry a password
            raise PydanticCustomError(
                "store_unsupported",
                "expected 'sqlite' or a PostgreSQL URL such as postgresql://user:password@host:5432/hitl",
            )
        return value.strip()

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() in ("debug", "info", "warning", "error"):
            return value.lower()
        return value


class AgentConfig(Section):
    """An agent's credential for ``/mcp``: a bearer token, usually ``${ENV}`` (``hitl-mcp agent add``
    keeps them in the store instead, hashed)."""

    token: SecretStr

    @field_validator("token")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < MIN_TOKEN:
            raise PydanticCustomError(
                "token_short",
                "an agent token must be at least {n} characters (hitl-mcp agent add makes one)",
                {"n": MIN_TOKEN},
            )
        return value
