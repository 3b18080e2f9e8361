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

The package, one idea a module: ``source`` (YAML with line numbers), ``errors`` (the messages),
``models`` (the sections), ``load`` (source -> models, and the state dir, port and starter text).
"""

from __future__ import annotations

from hitl_mcp.config.errors import ConfigError
from hitl_mcp.config.load import (
    effective_config,
    load_config,
    parse_config,
    resolve_http_port,
    resolve_state_dir,
    starter_config_text,
)
from hitl_mcp.config.models import (
    Config,
    Defaults,
    HostOverride,
    NotifyDefaults,
    ToolDefaults,
)
from hitl_mcp.config.server import AgentConfig, AuditAnchorConfig, CliConfig, HttpConfig, ServerConfig
from hitl_mcp.config.source import MAX_BYTES, MAX_NODES
from hitl_mcp.core.durations import parse_duration

__all__ = [
    "MAX_BYTES",
    "MAX_NODES",
    "AgentConfig",
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
    "resolve_http_port",
    "resolve_state_dir",
    "starter_config_text",
]
