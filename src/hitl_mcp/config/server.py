"""The ``server:`` section: where it listens, where it keeps state, and the store, audit and CLI
settings; and ``agents:``, the credentials agents present over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from hitl_mcp.config.section import Section, reject_bool
from hitl_mcp.core.durations import DAY, HOUR, bounded
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


BUILTIN = "builtin"


class IntrospectionConfig(Section):
    """An external provider's RFC 7662 introspection endpoint, for its opaque access tokens."""

    url: str
    client_id: str = Field(min_length=1)
    client_secret: SecretStr

    @field_validator("url", mode="before")
    @classmethod
    def _check_url(cls, value: Any) -> Any:
        return _http_url(value, "https://idp.example.com/oauth2/introspect")


class OAuthConfig(Section):
    """``server.oauth``: OAuth 2.1 access tokens on ``/mcp`` (docs/remote.md). The resource is
    ``<public_url>/mcp``; tokens must be for it (RFC 8707 audience) and carry ``hitl:ask``."""

    issuer: str
    """``builtin``: this server is its own authorization server (one operator, who consents on the
    inbox's sign-in); else the external provider's issuer URL (its JWKS or introspection checks)."""
    jwks_uri: str | None = None
    """External JWT access tokens: the provider's key set; unset, found in its published metadata."""
    introspection: IntrospectionConfig | None = None
    """External opaque access tokens: asked about at the provider's introspection endpoint."""
    audience: str | None = None
    """What an external token's ``aud`` must hold; unset: this server's resource, ``<public_url>/mcp``."""
    leeway: Annotated[float, bounded(0, 300)] = 30.0
    """External tokens: how far past ``exp`` a token still counts (clocks differ)."""
    access_token_ttl: Annotated[float, bounded(60, DAY)] = HOUR
    refresh_token_ttl: Annotated[float, bounded(HOUR, 365 * DAY)] = 30 * DAY
    dynamic_registration: bool = True
    """Built-in: clients may register themselves (RFC 7591), as Claude and ChatGPT do."""
    client_metadata_documents: bool = True
    """Built-in: a client may be an https URL that serves its metadata (Client ID Metadata Documents)."""

    @field_validator("issuer", "jwks_uri", mode="before")
    @classmethod
    def _check_issuer(cls, value: Any) -> Any:
        if value is None or value == BUILTIN:
            return value
        return _http_url(value, "https://idp.example.com/realms/team (or builtin)")

    @property
    def builtin(self) -> bool:
        return self.issuer == BUILTIN


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
    oauth: OAuthConfig | None = None
    """OAuth 2.1 for remote hosts (claude.ai, ChatGPT): an external provider or the built-in one."""

    @model_validator(mode="after")
    def _oauth_needs_public_url(self) -> ServerConfig:
        if self.oauth is not None and self.public_url is None:
            raise PydanticCustomError(
                "oauth_public_url",
                "server.oauth needs server.public_url: the https address hosts reach, which tokens are for",
            )
        return self

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
