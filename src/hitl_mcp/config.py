"""The YAML config: parsed with line numbers, ``${ENV}`` interpolated, validated into pydantic models.

Every error is a :class:`ConfigError` that names the file, the line and the key, and says what would
be valid. Values that came from the environment and values of secret fields never appear in an error.

YAML handling, in short:

- safe loading only (no ``!!python/...`` tags); a file over 1 MiB is refused;
- duplicate keys are an error (plain PyYAML keeps the last one silently);
- anchors and aliases (``&team`` / ``*team``) work, but the document may expand to at most
  :data:`MAX_NODES` values and aliases may not be recursive, which stops "billion laughs" documents;
  merge keys (``<<: *base``) are not supported;
- mapping keys are always taken as text (``8080:`` is the key ``"8080"``);
- ``${VAR}`` and ``${VAR:-default}`` are replaced inside string values (the default also applies
  when VAR is set but empty), and ``$${`` stands for a literal ``${``;
- a top-level section left empty (``server:`` with everything under it commented out) means its
  defaults, as if the key were absent.
"""

from __future__ import annotations

import copy
import os
import re
import types
import typing
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Secret,
    SecretBytes,
    SecretStr,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from hitl_mcp.channels import channel_module, channel_types
from hitl_mcp.channels import elicitation as elicitation_channel
from hitl_mcp.channels import web as web_channel
from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.durations import DAY, HOUR, bounded, parse_duration

__all__ = [
    "MAX_BYTES",
    "MAX_NODES",
    "AuditAnchorConfig",
    "CliConfig",
    "Config",
    "ConfigError",
    "Defaults",
    "HostOverride",
    "HttpConfig",
    "NotifyDefaults",
    "ServerConfig",
    "ToolDefaults",
    "effective_config",
    "load_config",
    "parse_config",
    "parse_duration",
    "resolve_state_dir",
    "starter_config_text",
]

#: a config file larger than this is refused
MAX_BYTES = 1024 * 1024
#: the most values (scalars, lists and mappings, counted after alias expansion) a config may hold
MAX_NODES = 100_000
#: the deepest nesting a config may have
MAX_DEPTH = 64

KeyPath = tuple[str | int, ...]


# --------------------------------------------------------------------------------------------- errors


class ConfigError(Exception):
    """A config problem: ``str(e)`` is ``"FILE:LINE: KEY: MESSAGE"``, leaving out the parts not known.

    ``more`` holds the other problems found in the same pass (this one is the first in file order),
    so a ``check`` command can list them all.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
        more: Iterable[ConfigError] = (),
    ) -> None:
        self.file = file
        self.line = line
        self.key = key
        self.message = message
        self.more: list[ConfigError] = list(more)
        super().__init__(str(self))

    def __str__(self) -> str:
        parts: list[str] = []
        if self.file is not None and self.line is not None:
            parts.append(f"{self.file}:{self.line}")
        elif self.file is not None:
            parts.append(self.file)
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.key:
            parts.append(self.key)
        parts.append(self.message)
        return ": ".join(parts)


def _key_text(path: KeyPath) -> str | None:
    """``("channels", "ops-slack", "allowed_users", 0)`` -> ``channels.ops-slack.allowed_users[0]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{_show(part)}]"
    return out or None


def _show(value: str, limit: int = 40) -> str:
    """A string for an error message: quoted, truncated."""
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return repr(value)


def _describe(value: Any, sensitive: bool) -> str:
    """What the user wrote, for ``got ...``: a type only when the value must not be shown."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return "a number" if sensitive else repr(value)
    if isinstance(value, str):
        return "a string" if sensitive else _show(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


# --------------------------------------------------------------------------------------------- models


class _Section(BaseModel):
    """Base of the config models: no unknown keys; an empty sub-section (``http:``) means its defaults."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _empty_sections_mean_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            drop = [
                k
                for k, v in data.items()
                if v is None
                and k in cls.model_fields
                and isinstance(cls.model_fields[k].annotation, type)
                and issubclass(cls.model_fields[k].annotation, BaseModel)  # type: ignore[arg-type]
            ]
            if drop:
                data = {k: v for k, v in data.items() if k not in drop}
        return data


def _reject_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "expected an integer")
    return value


class HttpConfig(_Section):
    host: str = Field("127.0.0.1", min_length=1)
    port: Annotated[int, BeforeValidator(_reject_bool), Field(ge=1, le=65535)] = 8765
    max_body_bytes: Annotated[int, BeforeValidator(_reject_bool), Field(ge=1024, le=64 * 1024 * 1024)] = (
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


class AuditAnchorConfig(_Section):
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


class CliConfig(_Section):
    require_token: bool = False
    """The answering verbs (answer, approve, deny) go through the running server's HTTP API with the
    web token instead of writing the database; see docs/security-audit.md for when that separates
    anything."""


class ServerConfig(_Section):
    http: HttpConfig = Field(default_factory=HttpConfig)
    public_url: str | None = None
    """The base URL at which webhooks reach this server; stored without a trailing slash."""
    state_dir: Path | None = None
    store: str = "sqlite"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    agent: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    """An identity for the agent this server serves. A request belongs to the client that asked:
    this, with the MCP client's ``clientInfo.name``."""
    audit_anchor: AuditAnchorConfig = Field(default_factory=AuditAnchorConfig)
    cli: CliConfig = Field(default_factory=CliConfig)

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
        if isinstance(value, str) and value != "sqlite":
            # no "got": a store URL may carry a password
            raise PydanticCustomError("store_unsupported", "only 'sqlite' is supported for now")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() in ("debug", "info", "warning", "error"):
            return value.lower()
        return value


ChannelList = Annotated[list[str], Field(min_length=1)]


class ToolDefaults(_Section):
    channels: ChannelList = Field(default_factory=lambda: ["web"])
    timeout: Annotated[float, bounded(1, 30 * DAY)] = DAY
    """How long the request stays answerable, in seconds."""


class NotifyDefaults(_Section):
    channels: ChannelList = Field(default_factory=lambda: ["web"])


class Defaults(_Section):
    heartbeat_seconds: Annotated[float, bounded(1, 300)] = 10.0
    max_block_seconds: Annotated[float, bounded(1, DAY)] | None = None
    ask_user: ToolDefaults = Field(default_factory=lambda: ToolDefaults(channels=["web"], timeout=DAY))
    request_approval: ToolDefaults = Field(
        default_factory=lambda: ToolDefaults(channels=["web"], timeout=HOUR)
    )
    notify_user: NotifyDefaults = Field(default_factory=lambda: NotifyDefaults(channels=["web"]))

    @model_validator(mode="before")
    @classmethod
    def _approval_timeout_default(cls, data: Any) -> Any:
        # request_approval given without a timeout keeps its own default (1h), not ask_user's (24h)
        if isinstance(data, dict):
            block = data.get("request_approval")
            if isinstance(block, dict) and "timeout" not in block:
                data = {**data, "request_approval": {**block, "timeout": HOUR}}
        return data


class HostOverride(_Section):
    budget_seconds: Annotated[float, bounded(1, DAY)]
    """How long one tool call may block for this host before returning ``pending``."""


_CHANNEL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_CHANNEL_NAME_HELP = "use 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter or a digit"
_SKIP_CROSS_CHECKS = "hitl_mcp.config.skip_cross_checks"


def _default_channels() -> dict[str, ChannelConfig]:
    """The embedded default: the web inbox, and the host's own window when the client can show a form."""
    return {"web": web_channel.Config(), "elicitation": elicitation_channel.Config()}


def _form_channels(channels: Any) -> list[str]:
    """The names of the elicitation channels in a ``channels`` value (as written, or as built)."""
    if channels is None:
        channels = _default_channels()
    if not isinstance(channels, dict):
        return []
    names = []
    for name, block in channels.items():
        kind = block.get("type") if isinstance(block, dict) else getattr(block, "type", None)
        if kind == elicitation_channel.Config.model_fields["type"].default:
            names.append(str(name))
    return names


class Config(_Section):
    server: ServerConfig = Field(default_factory=ServerConfig)
    defaults: Defaults = Field(default_factory=Defaults)
    hosts: dict[str, HostOverride] = Field(default_factory=dict)
    """Per-host overrides, keyed by the MCP ``clientInfo.name``."""
    channels: dict[str, SerializeAsAny[ChannelConfig]] = Field(default_factory=_default_channels)
    """Each value is an instance of its channel module's own ``Config`` class."""
    source: Path | None = Field(default=None, exclude=True)
    """The file this config came from; None for the embedded default. Not a YAML key."""

    def channel_names(self) -> list[str]:
        return list(self.channels)

    @model_validator(mode="before")
    @classmethod
    def _forms_in_default_lists(cls, data: Any) -> Any:
        """``ask_user`` and ``request_approval`` without a ``channels`` list of their own go to the
        web inbox and to every elicitation channel configured (the host's form is offered only
        when the client can show it)."""
        if not isinstance(data, dict):
            return data
        forms = _form_channels(data.get("channels"))
        defaults = data.get("defaults")
        if not forms or not isinstance(defaults, dict | None):
            return data
        defaults = dict(defaults or {})
        for tool in ("ask_user", "request_approval"):
            block = defaults.get(tool)
            if isinstance(block, dict | None) and "channels" not in (block or {}):
                defaults[tool] = {**(block or {}), "channels": ["web", *forms]}
        return {**data, "defaults": defaults}

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Config:
        if info.context and info.context.get(_SKIP_CROSS_CHECKS):
            return self  # parse_config runs them itself, with line numbers
        problems = _cross_check(self)
        if problems:
            path, message = problems[0]
            raise ValueError(f"{_key_text(path)}: {message}")
        return self


def _cross_check(config: Config, hidden: Collection[KeyPath] = ()) -> list[tuple[KeyPath, str]]:
    """Channel names that are not valid, and default channel lists that name unknown channels.

    A name at a path in ``hidden`` (it came from the environment) is not repeated in the message."""
    problems: list[tuple[KeyPath, str]] = []
    for name in config.channels:
        if not _CHANNEL_NAME.fullmatch(name):
            problems.append(
                (("channels", name), f"channel name {_show(name)} is not valid: {_CHANNEL_NAME_HELP}")
            )
    names = list(config.channels)
    known = f"configured channels: {', '.join(names)}" if names else "no channels are configured"
    for tool in ("ask_user", "request_approval", "notify_user"):
        block: ToolDefaults | NotifyDefaults = getattr(config.defaults, tool)
        for i, name in enumerate(block.channels):
            path = ("defaults", tool, "channels", i)
            if name not in config.channels:
                shown = "(a name from the environment)" if path in hidden else _show(name)
                problems.append((path, f"unknown channel {shown}; {known}"))
    return problems


_TOP_KEYS = [name for name, f in Config.model_fields.items() if not f.exclude]


# ------------------------------------------------------------------------------------- YAML to data


@dataclass
class _Doc:
    """Plain data from YAML, with where each key path was written and which values came from ${ENV}."""

    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    interpolated: set[KeyPath] = field(default_factory=set)
    #: every string produced by interpolation and every value taken from the environment
    secrets: set[str] = field(default_factory=set)

    def line(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest ancestor that was written in the file."""
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return None

    def known_prefix(self, path: KeyPath) -> KeyPath:
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return path[:n]
        return path


class _Loader(yaml.SafeLoader):
    """A safe loader whose aliases are shallow copies carrying the alias's own position.

    The copy shares its children with the anchored node, so composing stays linear; the position makes
    an error inside an aliased value point at the line where the alias was used.
    """

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            clone = copy.copy(node)
            clone.start_mark, clone.end_mark = event.start_mark, event.end_mark
            return clone
        return super().compose_node(parent, index)


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_REF_START = re.compile(r"\$\$\{|\$\{")
_REF_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)


class _Builder:
    def __init__(self, loader: _Loader, env: Mapping[str, str], file: str | None) -> None:
        self.loader = loader
        self.env = env
        self.file = file
        self.doc = _Doc(data=None)
        self.count = 0
        self.active: set[int] = set()
        self.unset: list[ConfigError] = []
        """Each ``${NAME}`` whose variable is not set: all of them are reported together."""

    def error(self, message: str, node: yaml.Node | None, path: KeyPath) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else self.doc.line(path)
        return ConfigError(message, file=self.file, line=line, key=_key_text(path))

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise self.error(
                f"the document expands to more than {MAX_NODES} values; aliases (*name) that repeat "
                "large anchors are refused",
                node,
                path,
            )
        if len(path) > MAX_DEPTH:
            raise self.error(f"nested more than {MAX_DEPTH} levels deep", node, path)
        if not isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            return self.scalar(node, path)
        # an alias is a copy sharing the anchored node's list of children: that list identifies it
        key = id(node.value)
        if key in self.active:
            raise self.error("an alias refers to a value that contains it (a recursive alias)", node, path)
        self.active.add(key)
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path)
            return self.sequence(node, path)
        finally:
            self.active.discard(key)

    def mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        if node.tag != _MAP_TAG:
            raise self.error(f"unsupported tag {_show(node.tag)}", node, path)
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                raise self.error("merge keys (<<) are not supported; write the keys out", key_node, path)
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error("a key must be plain text, not a list or a mapping", key_node, path)
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in out:
                raise self.error(
                    f"duplicate key {_show(key)} (first given on line {first_line[key]})",
                    key_node,
                    (*path, key),
                )
            first_line[key] = line
            self.doc.lines[(*path, key)] = line
            out[key] = self.build(value_node, (*path, key))
        return out

    def sequence(self, node: yaml.SequenceNode, path: KeyPath) -> list[Any]:
        if node.tag != _SEQ_TAG:
            raise self.error(f"unsupported tag {_show(node.tag)}", node, path)
        out: list[Any] = []
        for i, item in enumerate(node.value):
            self.doc.lines[(*path, i)] = item.start_mark.line + 1
            out.append(self.build(item, (*path, i)))
        return out

    def scalar(self, node: yaml.Node, path: KeyPath) -> Any:
        try:
            value = self.loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as e:
            raise self.error(str(e.problem), node, path) from None
        if isinstance(value, str):
            value = self.interpolate(value, node, path)
        return value

    def interpolate(self, text: str, node: yaml.Node, path: KeyPath) -> str:
        if "${" not in text:
            return text
        out: list[str] = []
        pos = 0
        substituted = False
        for m in _REF_START.finditer(text):
            if m.start() < pos:
                continue
            out.append(text[pos : m.start()])
            if m.group() == "$${":
                out.append("${")
                pos = m.end()
                continue
            end = text.find("}", m.end())
            ref = _REF_BODY.fullmatch(text, m.end(), end) if end >= 0 else None
            if ref is None or (ref.group(2) is not None and "${" in ref.group(2)):
                raise self.error(
                    "a ${...} reference must be ${NAME} or ${NAME:-default} (write $${ for a literal ${)",
                    node,
                    path,
                )
            name, default = ref.group(1), ref.group(2)
            value = self.env.get(name)
            if value is None or (value == "" and default is not None):
                if default is None:
                    self.unset.append(
                        self.error(
                            f"environment variable {name} is not set "
                            f"(write ${{{name}:-default}} to give a default)",
                            node,
                            path,
                        )
                    )
                value = default or ""
            else:
                self.doc.secrets.add(value)
            out.append(value)
            substituted = True
            pos = end + 1
        out.append(text[pos:])
        result = "".join(out)
        if substituted:
            self.doc.interpolated.add(path)
            self.doc.secrets.add(result)
        return result


def _syntax_message(e: yaml.MarkedYAMLError, text: str, line: int | None) -> str:
    message = str(e.problem or e.context or "invalid YAML")
    if "'\\t'" in message:
        return "a tab character; YAML is indented with spaces, not tabs"
    if e.context and e.context_mark and e.problem_mark and e.context_mark.line != e.problem_mark.line:
        message += f" ({e.context} started on line {e.context_mark.line + 1})"
    source_line = text.splitlines()[line - 1] if line and line <= len(text.splitlines()) else ""
    if "${" in source_line and ("{" in message or "[" in message):
        message += '; inside {...} or [...], quote values that use ${...}: "${NAME}"'
    return message


def _read_yaml(text: str, file: str | None, env: Mapping[str, str]) -> _Doc:
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ConfigError(f"the file is larger than {MAX_BYTES // 1024 // 1024} MiB", file=file)
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark else None
            raise ConfigError(_syntax_message(e, text, line), file=file, line=line) from None
        except yaml.YAMLError as e:
            raise ConfigError(f"invalid YAML: {e}", file=file) from None
        except RecursionError:
            raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", file=file) from None
        builder = _Builder(loader, env, file)
        if root is None:
            builder.doc.data = {}
            return builder.doc
        if not isinstance(root, yaml.MappingNode):
            got = "a list" if isinstance(root, yaml.SequenceNode) else "a single value"
            raise ConfigError(
                f"the top level must be a mapping of keys ({', '.join(_TOP_KEYS)}), got {got}",
                file=file,
                line=root.start_mark.line + 1,
            )
        builder.doc.lines[()] = root.start_mark.line + 1
        builder.doc.data = builder.build(root, ())
        if builder.unset:  # every one at once, before what their absence would break
            first, *rest = builder.unset
            first.more = rest
            raise first
        return builder.doc
    finally:
        loader.dispose()


# ------------------------------------------------------------------------------- validation errors

_PLAIN_MESSAGES = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "finite_number": "expected a finite number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "path_type": "expected a path",
}
#: error types whose message is complete without "got <the value>"
_NO_GOT = {"missing", "extra_forbidden", "value_error", "assertion_error", "store_unsupported"}


def _unwrap(annotation: Any) -> list[Any]:
    """The member types of an annotation: Annotated and Optional/Union peeled off."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for a in typing.get_args(annotation) for t in _unwrap(a) if t is not type(None)]
    return [annotation]


def _is_secret_type(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, SecretStr | SecretBytes | Secret)


def _contains_secret(annotation: Any, seen: set[int] | None = None) -> bool:
    seen = set() if seen is None else seen
    if id(annotation) in seen:
        return False
    seen.add(id(annotation))
    for member in _unwrap(annotation):
        if _is_secret_type(member):
            return True
        if isinstance(member, type) and issubclass(member, BaseModel):
            if any(_contains_secret(f.annotation, seen) for f in member.model_fields.values()):
                return True
        elif any(_contains_secret(a, seen) for a in typing.get_args(member)):
            return True
    return False


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    for name, f in model.model_fields.items():
        if (f.alias or name) == key or name == key:
            return f.annotation
    return None


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, bool]:
    """The annotation at ``loc`` under ``model`` (as far as it can be followed), and whether a
    secret type was passed on the way."""
    current: Any = model
    secret = False
    for part in loc:
        members = _unwrap(current)
        secret = secret or any(_is_secret_type(m) for m in members)
        nxt = None
        for m in members:
            if isinstance(m, type) and issubclass(m, BaseModel) and isinstance(part, str):
                nxt = _field_by_key(m, part)
            elif typing.get_origin(m) is dict and len(typing.get_args(m)) == 2:
                nxt = typing.get_args(m)[1]
            elif typing.get_origin(m) in (list, tuple, set, frozenset) and typing.get_args(m):
                nxt = typing.get_args(m)[0]
            if nxt is not None:
                break
        if nxt is None:
            return current, secret
        current = nxt
    return current, secret


def _yaml_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items() if not f.exclude]


def _scrub(message: str, doc: _Doc, extra: Any = None) -> str:
    hide = set(doc.secrets)
    if isinstance(extra, str):
        hide.add(extra)
    for value in sorted(hide, key=len, reverse=True):
        if len(value) >= 4:
            message = message.replace(value, "***")
    return message


def _convert(
    exc: ValidationError, model: type[BaseModel], prefix: KeyPath, doc: _Doc, file: str | None
) -> list[ConfigError]:
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = (*prefix, *loc)
        kind = err["type"]
        ctx = err.get("ctx") or {}
        annotation, secret_on_path = _annotation_at(model, loc)
        sensitive = (
            secret_on_path or _contains_secret(annotation) or doc.known_prefix(path) in doc.interpolated
        )
        shown = path if kind == "missing" else doc.known_prefix(path)

        if kind == "missing":
            message = "a required key is missing"
        elif kind == "extra_forbidden":
            parent, _ = _annotation_at(model, loc[:-1])
            models = [m for m in _unwrap(parent) if isinstance(m, type) and issubclass(m, BaseModel)]
            message = f"unknown key {_show(str(loc[-1]))}"
            if models:
                message += f"; valid keys: {', '.join(_yaml_keys(models[0]))}"
        elif kind in _PLAIN_MESSAGES:
            message = _PLAIN_MESSAGES[kind]
        elif kind == "literal_error":
            message = f"expected {ctx.get('expected')}"
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            words = {
                "greater_than_equal": ("at least", "ge"),
                "greater_than": ("more than", "gt"),
                "less_than_equal": ("at most", "le"),
                "less_than": ("less than", "lt"),
            }[kind]
            message = f"must be {words[0]} {ctx.get(words[1])}"
        elif kind == "too_short":
            n = ctx.get("min_length")
            message = f"must have at least {n} item{'s' if n != 1 else ''}"
        elif kind == "string_too_short":
            n = ctx.get("min_length")
            message = "must not be empty" if n == 1 else f"must be at least {n} characters long"
        else:
            message = str(err["msg"])
            if message.startswith("Value error, "):
                message = message[len("Value error, ") :]
            message = message[:1].lower() + message[1:]
        if kind not in _NO_GOT:
            message += f", got {_describe(err.get('input'), sensitive)}"
        message = _scrub(message, doc, err.get("input") if sensitive else None)
        out.append(ConfigError(message, file=file, line=doc.line(shown), key=_key_text(shown)))
    return out


# ---------------------------------------------------------------------------------------- building


def _build(doc: _Doc, file: str | None) -> Config:
    errors: list[ConfigError] = []

    def err(path: KeyPath, message: str) -> None:
        message = _scrub(message, doc)
        errors.append(ConfigError(message, file=file, line=doc.line(path), key=_key_text(path)))

    for key in doc.data:
        if key not in _TOP_KEYS:
            err((key,), f"unknown key {_show(key)}; valid keys: {', '.join(_TOP_KEYS)}")
    # an empty section means its defaults, as if it were absent
    data: dict[str, Any] = {k: v for k, v in doc.data.items() if k in _TOP_KEYS and v is not None}

    channels: dict[str, ChannelConfig] | None = None
    if "channels" in data:
        channels = {}
        raw = data["channels"]
        if not isinstance(raw, dict):
            err(
                ("channels",), f"expected a mapping of channel names to channels, got {_describe(raw, False)}"
            )
            raw = {}
        types_ = ", ".join(channel_types())
        for name, block in raw.items():
            path: KeyPath = ("channels", name)
            if not _CHANNEL_NAME.fullmatch(name):
                err(path, f"channel name {_show(name)} is not valid: {_CHANNEL_NAME_HELP}")
            if not isinstance(block, dict):
                got = _describe(block, path in doc.interpolated)
                err(path, f"expected a mapping with a 'type' key (one of: {types_}), got {got}")
                continue
            type_name = block.get("type")
            if type_name is None:
                err(path, f"a 'type' key is required; channel types: {types_}")
                continue
            if not isinstance(type_name, str):
                err(
                    (*path, "type"),
                    f"expected a channel type (one of: {types_}), got {_describe(type_name, False)}",
                )
                continue
            try:
                module = channel_module(type_name)
                model: type[ChannelConfig] = module.Config
            except (KeyError, AttributeError):
                shown = "a string" if (*path, "type") in doc.interpolated else _show(type_name)
                err((*path, "type"), f"unknown channel type {shown}; channel types: {types_}")
                continue
            except ImportError as e:
                err((*path, "type"), f"channel type {_show(type_name)} could not be loaded ({e.name or e})")
                continue
            try:
                channels[name] = model.model_validate(block)
            except ValidationError as e:
                errors.extend(_convert(e, model, path, doc, file))

    values: dict[str, Any] = {k: v for k, v in data.items() if k != "channels"}
    if channels is not None:
        values["channels"] = channels
    if file is not None:
        values["source"] = Path(file)
    config: Config | None = None
    try:
        config = Config.model_validate(values, context={_SKIP_CROSS_CHECKS: True})
    except ValidationError as e:
        errors.extend(_convert(e, Config, (), doc, file))

    if config is not None and not errors:
        for path, message in _cross_check(config, doc.interpolated):
            if path[0] == "channels":
                continue  # names were checked above, with the channel's line
            err(path, message)

    if errors or config is None:
        errors.sort(key=lambda e: e.line if e.line is not None else 1 << 30)
        first = errors[0]
        raise ConfigError(first.message, file=first.file, line=first.line, key=first.key, more=errors[1:])
    return config


# ------------------------------------------------------------------------------------------ public


def parse_config(text: str, *, source: str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """A :class:`Config` from YAML text. ``source`` names the file in errors; ``env`` defaults to
    ``os.environ``."""
    doc = _read_yaml(text, source, os.environ if env is None else env)
    return _build(doc, source)


def load_config(path: str | Path | None, env: Mapping[str, str] | None = None) -> Config:
    """The config in ``path`` (``~`` expanded); ``None`` gives the embedded default: the web inbox
    and SQLite, the same as ``configs/minimal.yaml``."""
    if path is None:
        return Config()
    shown = str(path)
    file = Path(path).expanduser()
    try:
        with file.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("no such file", file=shown) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a config file", file=shown) from None
    except OSError as e:
        raise ConfigError(f"cannot be read: {e.strerror or e}", file=shown) from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"the file is larger than {MAX_BYTES // 1024 // 1024} MiB", file=shown)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError("not valid UTF-8 text", file=shown, line=line) from None
    config = parse_config(text, source=shown, env=env)
    config.source = file.absolute()
    return config


def resolve_state_dir(
    config: Config, cli_value: str | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """Where state lives: ``cli_value``, else ``$HITL_STATE_DIR``, else ``server.state_dir``, else
    ``$XDG_STATE_HOME/hitl-mcp``, else ``~/.local/state/hitl-mcp``. ``~`` is expanded; a relative
    ``server.state_dir`` is taken relative to the config file. The directory is not created here."""
    env = os.environ if env is None else env
    if cli_value:
        return Path(cli_value).expanduser()
    if env.get("HITL_STATE_DIR"):
        return Path(env["HITL_STATE_DIR"]).expanduser()
    if config.server.state_dir is not None:
        path = config.server.state_dir.expanduser()
        if not path.is_absolute() and config.source is not None:
            path = config.source.parent / path
        return path
    xdg = env.get("XDG_STATE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "hitl-mcp"
    return Path("~/.local/state/hitl-mcp").expanduser()


def resolve_http_port(
    config: Config, cli_value: int | None = None, env: Mapping[str, str] | None = None
) -> int:
    """The inbox and API port: ``cli_value`` (``--port``), else ``$HITL_PORT``, else
    ``server.http.port`` (8765 by default). ``make run PORT=9000`` passes ``--port``."""
    env = os.environ if env is None else env
    if cli_value is not None:
        return cli_value
    raw = env.get("HITL_PORT", "").strip()
    if not raw:
        return config.server.http.port
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ConfigError(f"$HITL_PORT must be a port number from 1 to 65535, not {_show(raw)}")
    return int(raw)


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr | SecretBytes | Secret):
        return "***"
    if isinstance(value, BaseModel):
        return {
            (f.alias or name): _plain(getattr(value, name))
            for name, f in type(value).model_fields.items()
            if not f.exclude
        }
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def effective_config(config: Config) -> dict[str, Any]:
    """The whole effective config as plain data (YAML keys, every default filled in), with every
    secret replaced by ``"***"``."""
    result = _plain(config)
    assert isinstance(result, dict)
    return result


def starter_config_text() -> str:
    """The commented starter config that ``hitl-mcp init`` writes."""
    return resources.files("hitl_mcp").joinpath("starter.yaml").read_text(encoding="utf-8")
