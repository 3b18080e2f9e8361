"""Reading a config: the YAML source validated into the models, every problem said with its line."""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, Secret, SecretBytes, SecretStr, ValidationError
from pydantic.fields import FieldInfo

from hitl_mcp.channels import channel_module, channel_types
from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.config.errors import ConfigError, KeyPath, _key_text, _show
from hitl_mcp.config.escalation import expand_people
from hitl_mcp.config.models import (
    _CHANNEL_NAME,
    _CHANNEL_NAME_HELP,
    _SKIP_CROSS_CHECKS,
    _TOP_KEYS,
    Config,
    _cross_check,
)
from hitl_mcp.config.source import MAX_BYTES, _Doc, _read_yaml
from hitl_mcp.config.validation import convert as _convert
from hitl_mcp.config.validation import describe as _describe
from hitl_mcp.config.validation import scrub as _scrub
from hitl_mcp.core.durations import DurationValidator, InstantValidator, short_duration
from hitl_mcp.core.models import iso


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
            block, named = expand_people(name, block, data.get("people"))
            for problem in named:
                err(*problem)
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


def parse_config(text: str, *, source: str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """A :class:`Config` from YAML text. ``source`` names the file in errors; ``env`` defaults to
    ``os.environ``."""
    doc = _read_yaml(text, source, os.environ if env is None else env, _TOP_KEYS)
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
            (f.alias or name): _written(f, _plain(getattr(value, name)))
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


def _written(field: FieldInfo, value: Any) -> Any:
    """A duration as a duration (``1d``, ``10s``) and a moment as an ISO time, the way a config
    says them, rather than the seconds they are kept as."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return value
    kinds = {type(v) for v in _validators(field.annotation, field.metadata)}
    if DurationValidator in kinds:
        return short_duration(value)
    if InstantValidator in kinds:
        return iso(value)
    return value


def _validators(annotation: Any, metadata: list[Any]) -> list[Any]:
    """The metadata of a field, and of every ``Annotated`` inside its type (``Annotated[...] | None``)."""
    found = list(metadata)
    found += getattr(annotation, "__metadata__", ())
    for arg in get_args(annotation):
        found += _validators(arg, [])
    return found


def effective_config(config: Config) -> dict[str, Any]:
    """The whole effective config as plain data (YAML keys, every default filled in), with every
    secret replaced by ``"***"``."""
    from hitl_mcp.kit.net import redact

    result = _plain(config)
    assert isinstance(result, dict)
    if result["server"]["store"] != "sqlite":  # a PostgreSQL URL may carry a password
        result["server"]["store"] = redact(result["server"]["store"])
    return result


def starter_config_text() -> str:
    """The commented starter config that ``hitl-mcp init`` writes."""
    return resources.files("hitl_mcp.config").joinpath("starter.yaml").read_text(encoding="utf-8")
