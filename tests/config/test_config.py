"""The YAML config: defaults, interpolation, validation, and errors that name file, line and key."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path
from typing import Literal

import pytest
import yaml
from pydantic import SecretStr, ValidationError, field_validator

import hitl_mcp.config.load as config_load
from hitl_mcp.channels import channel_types
from hitl_mcp.channels import elicitation as elicitation_channel
from hitl_mcp.channels import web as web_channel
from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.config import (
    MAX_BYTES,
    Config,
    ConfigError,
    effective_config,
    load_config,
    parse_config,
    parse_duration,
    resolve_state_dir,
    starter_config_text,
)

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-Tok3n-value-9f8e7d"


def parse(text: str, env: dict[str, str] | None = None) -> Config:
    return parse_config(textwrap.dedent(text), source="hitl.yaml", env=env or {})


def error(text: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(text, env)
    return info.value


# ------------------------------------------------------------------------------- defaults and files


def test_embedded_default() -> None:
    config = load_config(None)
    assert config.source is None
    assert config.server.http.host == "127.0.0.1"
    assert config.server.http.port == 8765
    assert config.server.public_url is None
    assert config.server.state_dir is None
    assert config.server.store == "sqlite"
    assert config.server.log_level == "info"
    assert config.defaults.heartbeat_seconds == 10
    assert config.defaults.max_block_seconds is None
    assert config.defaults.ask_user.channels == ["web", "elicitation"]
    assert config.defaults.ask_user.timeout == 24 * 3600
    assert config.defaults.request_approval.channels == ["web", "elicitation"]
    assert config.defaults.request_approval.timeout == 3600
    assert config.defaults.notify_user.channels == ["web"]
    assert config.hosts == {}
    assert config.channel_names() == ["web", "elicitation"]
    assert type(config.channels["web"]) is web_channel.Config
    assert config.channels["web"].token is None
    assert type(config.channels["elicitation"]) is elicitation_channel.Config


def test_minimal_yaml_is_the_embedded_default() -> None:
    path = ROOT / "configs" / "minimal.yaml"
    config = load_config(path, env={})
    assert config.source == path.absolute()
    assert config.model_dump() == load_config(None).model_dump()
    assert effective_config(config) == effective_config(load_config(None))
    assert type(config.channels["web"]) is web_channel.Config
    assert type(config.channels["elicitation"]) is elicitation_channel.Config


def test_starter_yaml_loads() -> None:
    text = starter_config_text()
    assert text.startswith("# hitl-mcp config")
    assert text == (ROOT / "src" / "hitl_mcp" / "config" / "starter.yaml").read_text(encoding="utf-8")
    config = parse_config(text, source="hitl.yaml", env={"HITL_WEB_TOKEN": "x" * 24})
    assert config.channel_names() == ["web", "elicitation"]
    assert effective_config(config) == effective_config(load_config(None))


def test_empty_file_and_empty_sections_mean_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "hitl.yaml"
    path.write_text("# nothing yet\n")
    assert effective_config(load_config(path)) == effective_config(load_config(None))
    config = parse("server:\ndefaults:\n  ask_user:\nchannels:\n")
    assert effective_config(config) == effective_config(load_config(None))


def test_a_full_config() -> None:
    config = parse(
        """
        server:
          http: {host: 0.0.0.0, port: 9000}
          public_url: https://hitl.example.com/
          state_dir: ~/hitl-state
          log_level: DEBUG
        defaults:
          heartbeat_seconds: 5s
          max_block_seconds: 2m
          ask_user: {channels: [inbox], timeout: 1h30m}
          request_approval: {channels: [inbox]}
          notify_user: {channels: [inbox]}
        hosts:
          claude-code: {budget_seconds: 10m}
          Claude Desktop: {budget_seconds: 45}
        channels:
          inbox: {type: web, token: abc}
        """
    )
    assert config.server.http.host == "0.0.0.0"
    assert config.server.http.port == 9000
    assert config.server.public_url == "https://hitl.example.com"
    assert config.server.state_dir == Path("~/hitl-state")
    assert config.server.log_level == "debug"
    assert config.defaults.heartbeat_seconds == 5
    assert config.defaults.max_block_seconds == 120
    assert config.defaults.ask_user.timeout == 5400
    # request_approval given without a timeout keeps its own default, not ask_user's
    assert config.defaults.request_approval.timeout == 3600
    assert config.hosts["claude-code"].budget_seconds == 600
    assert config.hosts["Claude Desktop"].budget_seconds == 45
    assert config.channel_names() == ["inbox"]
    assert config.channels["inbox"].token.get_secret_value() == "abc"  # type: ignore[attr-defined]
    assert config.source == Path("hitl.yaml")


def test_effective_config_round_trips_through_yaml() -> None:
    config = parse(
        """
        hosts:
          cursor: {budget_seconds: 30}
        defaults:
          ask_user: {channels: [web, two]}
        channels:
          web: {type: web}
          two: {type: web}
        """
    )
    data = effective_config(config)
    again = parse_config(yaml.safe_dump(data), env={})
    assert effective_config(again) == data
    assert "source" not in data


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: no such file"
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert info.value.file == str(tmp_path)


# ------------------------------------------------------------------------------------ error format


def test_config_error_format() -> None:
    e = ConfigError("expected a list", file="hitl.yaml", line=12, key="channels.phone.to")
    assert str(e) == "hitl.yaml:12: channels.phone.to: expected a list"
    assert (e.file, e.line, e.key, e.message) == ("hitl.yaml", 12, "channels.phone.to", "expected a list")
    assert str(ConfigError("bad", file="hitl.yaml")) == "hitl.yaml: bad"
    assert str(ConfigError("bad", key="server")) == "server: bad"
    assert str(ConfigError("bad", line=3)) == "line 3: bad"
    assert str(ConfigError("bad")) == "bad"


def test_errors_from_a_file_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "hitl.yaml"
    path.write_text("server:\n  http:\n    prot: 80\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    e = info.value
    assert (e.file, e.line, e.key) == (str(path), 3, "server.http.prot")
    valid = "valid keys: host, port, max_body_bytes, header_timeout"
    assert str(e) == f"{path}:3: server.http.prot: unknown key 'prot'; {valid}"


# -------------------------------------------------------------------------------------- key errors


def test_unknown_top_level_key() -> None:
    e = error("server: {}\nservr:\n  http: {}\n")
    assert str(e) == (
        "hitl.yaml:2: servr: unknown key 'servr';"
        " valid keys: server, defaults, hosts, channels, people, escalation, agents, delegations"
    )


def test_source_is_not_a_yaml_key() -> None:
    e = error("source: elsewhere.yaml\n")
    assert (e.line, e.key) == (1, "source")
    assert e.message.startswith("unknown key 'source'")


def test_unknown_nested_key() -> None:
    e = error(
        """
        server:
          http:
            host: 127.0.0.1
            prot: 80
        """
    )
    valid = "valid keys: host, port, max_body_bytes, header_timeout"
    assert str(e) == f"hitl.yaml:5: server.http.prot: unknown key 'prot'; {valid}"


def test_unknown_key_in_a_channel_lists_that_channels_keys() -> None:
    e = error("channels:\n  web:\n    type: web\n    tokn: abc\n")
    assert (
        str(e) == "hitl.yaml:4: channels.web.tokn: unknown key 'tokn'; valid keys: type, token, session_ttl, "
        "operator_answers"
    )


def test_missing_required_key() -> None:
    e = error("hosts:\n  cursor:\n    budget: 30\n")
    # the missing key is reported at its mapping's line, and the misspelt one after it
    assert str(e) == "hitl.yaml:2: hosts.cursor.budget_seconds: a required key is missing"
    assert [str(m) for m in e.more] == [
        "hitl.yaml:3: hosts.cursor.budget: unknown key 'budget'; valid keys: budget_seconds"
    ]


def test_several_errors_are_reported_in_file_order() -> None:
    e = error("defaults:\n  heartbeat_seconds: soon\nserver:\n  http: {port: 0}\nfoo: 1\n")
    assert [(x.line, x.key) for x in [e, *e.more]] == [
        (2, "defaults.heartbeat_seconds"),
        (4, "server.http.port"),
        (5, "foo"),
    ]


# ------------------------------------------------------------------------------------- value errors


def test_wrong_type() -> None:
    e = error("defaults:\n  ask_user:\n    channels: web\n")
    assert str(e) == "hitl.yaml:3: defaults.ask_user.channels: expected a list, got 'web'"
    e = error("server:\n  http: 8765\n")
    assert str(e) == "hitl.yaml:2: server.http: expected a mapping, got 8765"
    e = error("server:\n  http: {port: eighty}\n")
    assert str(e) == "hitl.yaml:2: server.http.port: expected an integer, got 'eighty'"
    e = error("server:\n  http: {port: true}\n")
    assert (e.key, e.message) == ("server.http.port", "expected an integer, got true")


def test_long_values_are_truncated() -> None:
    e = error(f"server:\n  log_level: {'x' * 100}\n")
    assert "x" * 39 + "…'" in e.message
    assert "x" * 41 not in e.message


def test_bad_port() -> None:
    e = error("server:\n  http:\n    port: 70000\n")
    assert str(e) == "hitl.yaml:3: server.http.port: must be at most 65535, got 70000"
    e = error("server:\n  http:\n    host: localhost\n    port: 0\n")
    assert str(e) == "hitl.yaml:4: server.http.port: must be at least 1, got 0"


def test_bad_duration() -> None:
    e = error("defaults:\n  request_approval:\n    timeout: soon\n")
    assert str(e) == (
        "hitl.yaml:3: defaults.request_approval.timeout: "
        "expected a duration such as 90s, 10m, 24h or a number of seconds, got 'soon'"
    )


def test_duration_out_of_range() -> None:
    e = error("defaults:\n  ask_user: {timeout: 45d}\n")
    assert str(e) == "hitl.yaml:2: defaults.ask_user.timeout: must be between 1s and 30d, got '45d'"
    e = error("defaults:\n  heartbeat_seconds: 0.5\n")
    assert (e.line, e.key, e.message) == (
        2,
        "defaults.heartbeat_seconds",
        "must be between 1s and 5m, got 0.5",
    )
    e = error("hosts:\n  x: {budget_seconds: 2d}\n")
    assert (e.key, e.message) == ("hosts.x.budget_seconds", "must be between 1s and 1d, got '2d'")
    e = error("defaults:\n  max_block_seconds: 25h\n")
    assert e.key == "defaults.max_block_seconds"


def test_empty_channel_list() -> None:
    e = error("defaults:\n  notify_user: {channels: []}\n")
    assert (e.line, e.key, e.message) == (
        2,
        "defaults.notify_user.channels",
        "must have at least 1 item, got a list",
    )


def test_public_url() -> None:
    assert parse("server: {public_url: 'http://h.example:8080/base/'}").server.public_url == (
        "http://h.example:8080/base"
    )
    assert parse("server: {public_url: ''}").server.public_url is None
    for bad in (
        "ftp://h.example",
        "hitl.example.com",
        "https://",
        "https://h.example/?a=1",
        "http://h:99999",
    ):
        e = error(f"server:\n  public_url: '{bad}'\n")
        assert (e.line, e.key) == (2, "server.public_url")
        assert e.message.startswith("expected an http:// or https:// base URL")


def test_store_is_sqlite_or_a_postgresql_url_and_is_not_echoed() -> None:
    for bad in ("mysql://app:hunter2@db/hitl", "postgresql://app:hunter2@db:99999/hitl", "hunter2"):
        e = error(f"server:\n  store: '{bad}'\n")
        assert str(e) == (
            "hitl.yaml:2: server.store: expected 'sqlite' or a PostgreSQL URL such as "
            "postgresql://user:password@host:5432/hitl"
        )
    for good in ("sqlite", "postgresql://app:hunter2@db/hitl", "postgres:///hitl"):
        assert parse(f"server:\n  store: '{good}'\n").server.store == good


def test_store_pool_is_a_positive_size() -> None:
    assert parse("server: {}\n").server.store_pool == 10
    assert parse("server:\n  store_pool: 3\n").server.store_pool == 3
    e = error("server:\n  store_pool: 0\n")
    assert (e.line, e.key) == (2, "server.store_pool")


def test_log_level() -> None:
    e = error("server:\n  log_level: loud\n")
    assert (
        str(e) == "hitl.yaml:2: server.log_level: expected 'debug', 'info', 'warning' or 'error', got 'loud'"
    )


# ----------------------------------------------------------------------------------------- channels


def test_unknown_channel_type() -> None:
    e = error("channels:\n  web: {type: web}\n  phone:\n    type: carrier_pigeon\n")
    assert str(e) == (
        "hitl.yaml:4: channels.phone.type: unknown channel type 'carrier_pigeon'; "
        f"channel types: {', '.join(channel_types())}"
    )
    assert "web" in channel_types()


def test_channel_without_type_or_not_a_mapping() -> None:
    e = error("channels:\n  web: {token: abc}\n")
    assert (e.line, e.key) == (2, "channels.web")
    assert e.message.startswith("a 'type' key is required; channel types: ")
    e = error("channels:\n  web: web\n")
    assert (e.line, e.key) == (2, "channels.web")
    assert e.message.endswith("got 'web'")
    e = error("channels: [web]\n")
    assert (e.line, e.key) == (1, "channels")


def test_bad_channel_name() -> None:
    e = error("channels:\n  Ops Slack: {type: web}\ndefaults:\n  ask_user: {channels: [Ops Slack]}\n")
    assert (e.line, e.key) == (2, "channels['Ops Slack']")
    assert e.message.startswith("channel name 'Ops Slack' is not valid")
    assert parse(
        "channels:\n  a-1_b: {type: web}\ndefaults:\n  ask_user: {channels: [a-1_b]}\n"
        "  request_approval: {channels: [a-1_b]}\n  notify_user: {channels: [a-1_b]}\n"
    )


def test_undefined_channel_in_defaults() -> None:
    e = error(
        """
        channels:
          web: {type: web}
          inbox2: {type: web}
        defaults:
          request_approval:
            channels:
              - web
              - ops-slack
        """
    )
    assert str(e) == (
        "hitl.yaml:9: defaults.request_approval.channels[1]: "
        "unknown channel 'ops-slack'; configured channels: web, inbox2"
    )


def test_default_web_channel_is_gone_when_channels_are_given() -> None:
    e = error("channels:\n  inbox: {type: web}\n")
    # ask_user's default list names "web", which this config does not have
    assert e.key == "defaults.ask_user.channels[0]"
    assert e.message == "unknown channel 'web'; configured channels: inbox"


def test_config_built_in_code_is_cross_checked_too() -> None:
    with pytest.raises(ValidationError, match="unknown channel 'web'"):
        Config.model_validate({"channels": {"inbox": web_channel.Config()}})
    assert Config.model_validate({}).channel_names() == ["web", "elicitation"]


# ------------------------------------------------------------------------------------ interpolation


def test_interpolation() -> None:
    config = parse(
        """
        server:
          http:
            host: ${HOST}
            port: ${PORT:-8000}
          public_url: "https://${DOMAIN}:${HTTPS_PORT}/hitl"
          state_dir: ${STATE:-/var/lib/hitl}
        channels:
          web: {type: web, token: "${TOKEN:-}"}
        """,
        env={"HOST": "0.0.0.0", "DOMAIN": "hitl.example.com", "HTTPS_PORT": "8443", "STATE": ""},
    )
    assert config.server.http.host == "0.0.0.0"
    assert config.server.http.port == 8000
    assert config.server.public_url == "https://hitl.example.com:8443/hitl"
    assert config.server.state_dir == Path("/var/lib/hitl")  # set but empty: the default applies
    assert config.channels["web"].token.get_secret_value() == ""  # type: ignore[attr-defined]


def test_interpolation_escape_and_lists() -> None:
    config = parse(
        """
        hosts:
          "$${NOT_A_VAR}": {budget_seconds: "${BUDGET}"}
        channels:
          web: {type: web, token: "pa$$word-$${LITERAL}-${A}${B}"}
        """,
        env={"BUDGET": "1m", "A": "x", "B": "y"},
    )
    # keys are never interpolated; values are, and $${ is a literal ${
    assert list(config.hosts) == ["$${NOT_A_VAR}"]
    assert config.hosts["$${NOT_A_VAR}"].budget_seconds == 60
    assert config.channels["web"].token.get_secret_value() == "pa$$word-${LITERAL}-xy"  # type: ignore[attr-defined]
    config = parse("defaults:\n  ask_user: {channels: ['${CH}']}\n", env={"CH": "web"})
    assert config.defaults.ask_user.channels == ["web"]


def test_missing_env_var() -> None:
    e = error("server:\n  http:\n    host: 127.0.0.1\n    port: ${HITL_PORT}\n")
    assert (e.file, e.line, e.key) == ("hitl.yaml", 4, "server.http.port")
    assert e.message.startswith("environment variable HITL_PORT is not set")


def test_bad_reference() -> None:
    e = error("server:\n  log_level: '${not a name}'\n")
    assert (e.line, e.key) == (2, "server.log_level")
    assert "${NAME}" in e.message
    e = error("server:\n  log_level: '${UNCLOSED'\n")
    assert (e.line, e.key) == (2, "server.log_level")


def test_unquoted_reference_in_flow_mapping_gets_a_hint() -> None:
    e = error("channels:\n  web: {type: web, token: ${TOKEN}}\n", env={"TOKEN": SECRET})
    assert e.line == 2
    assert "quote values that use ${...}" in e.message


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HITL_TEST_HOST", "10.1.2.3")
    assert parse_config("server: {http: {host: '${HITL_TEST_HOST}'}}").server.http.host == "10.1.2.3"


# ------------------------------------------------------------------------------------------ secrets


def test_secret_is_masked_in_effective_config() -> None:
    config = parse("channels:\n  web:\n    type: web\n    token: ${TOKEN}\n", env={"TOKEN": SECRET})
    assert config.channels["web"].token.get_secret_value() == SECRET  # type: ignore[attr-defined]
    data = effective_config(config)
    assert data["channels"]["web"]["token"] == "***"
    assert SECRET not in repr(data)
    assert SECRET not in yaml.safe_dump(data)


def test_secret_never_in_errors() -> None:
    env = {"TOKEN": SECRET}
    cases = [
        # an error elsewhere in the file, with the secret set
        "channels:\n  web:\n    type: web\n    token: ${TOKEN}\n    extra: 1\n",
        # interpolated values in fields that reject them
        "server:\n  http: {port: '${TOKEN}'}\n",
        "server:\n  log_level: '${TOKEN}'\n",
        "defaults:\n  heartbeat_seconds: '${TOKEN}'\n",
        "server:\n  public_url: 'https://${TOKEN}'\n  store: x\n",
        "channels:\n  web: {type: '${TOKEN}'}\n",
        "channels:\n  web: '${TOKEN}'\n",
        "defaults:\n  ask_user: {channels: ['${TOKEN}']}\n",
        # a literal secret in a secret field of the wrong type
        f"channels:\n  web:\n    type: web\n    token: [{SECRET}]\n",
        "channels:\n  web:\n    type: web\n    token: 123456789012\n",
    ]
    for text in cases:
        e = error(text, env=env)
        everything = " | ".join(str(x) for x in [e, *e.more])
        assert SECRET not in everything, text
        assert "123456789012" not in everything, text
        assert e.line is not None, text


def test_short_interpolated_values_are_not_shown_either() -> None:
    e = error("server:\n  http: {port: '${P}'}\n", env={"P": "abc"})
    assert str(e) == "hitl.yaml:2: server.http.port: expected an integer, got a string"


def test_a_channel_validator_that_echoes_its_input_does_not_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    class LeakyConfig(ChannelConfig):
        type: Literal["leaky"] = "leaky"
        api_key: str

        @field_validator("api_key")
        @classmethod
        def _check(cls, value: str) -> str:
            raise ValueError(f"{value} is not a valid key")

    module = types.SimpleNamespace(Config=LeakyConfig)
    monkeypatch.setattr(config_load, "channel_module", lambda name: module)
    e = error("channels:\n  web: {type: leaky, api_key: '${KEY}'}\n", env={"KEY": SECRET})
    assert str(e) == "hitl.yaml:2: channels.web.api_key: *** is not a valid key"


def test_secret_in_effective_config_of_an_error_free_file_with_default() -> None:
    config = parse("channels:\n  web: {type: web, token: '${TOKEN:-fallback-secret}'}\n")
    assert effective_config(config)["channels"]["web"]["token"] == "***"
    assert effective_config(load_config(None))["channels"]["web"]["token"] is None
    config.channels["web"] = web_channel.Config(token=SecretStr(SECRET))
    assert SECRET not in repr(effective_config(config))


# ------------------------------------------------------------------------------------ malformed YAML


def test_duplicate_key() -> None:
    e = error("server:\n  http:\n    port: 8000\n    port: 9000\n")
    assert str(e) == "hitl.yaml:4: server.http.port: duplicate key 'port' (first given on line 3)"
    e = error("channels:\n  web: {type: web}\nserver: {}\nchannels:\n  web: {type: web}\n")
    assert (e.line, e.key) == (4, "channels")


def test_syntax_error() -> None:
    e = error("server:\n  http:\n    host: [127.0.0.1\n    port: 8765\n")
    assert e.file == "hitl.yaml"
    assert e.line == 4
    assert e.key is None
    assert "flow sequence started on line 3" in e.message
    e = error("server:\n  http: {host: a\n  port: 1\n")
    assert e.line is not None and e.line >= 2


def test_tab_indentation() -> None:
    e = error("server:\n\thttp: {}\n")
    assert str(e) == "hitl.yaml:2: a tab character; YAML is indented with spaces, not tabs"


def test_top_level_must_be_a_mapping() -> None:
    e = error("- server\n- channels\n")
    assert (e.file, e.line, e.key) == ("hitl.yaml", 1, None)
    assert e.message.startswith("the top level must be a mapping")
    assert e.message.endswith("got a list")
    e = error("\n\njust some text\n")
    assert (e.line, e.message[-14:]) == (3, "a single value")


def test_several_documents() -> None:
    e = error("server: {}\n---\nchannels: {}\n")
    assert e.line == 2


def test_alias_bomb() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 6):  # "f" expands to 9**6 strings: far over the budget, still quick to build without it
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    text = "hosts:\n" + "".join(f"  {line}\n" for line in lines)
    e = error(text)
    assert e.file == "hitl.yaml"
    assert e.line is not None and 2 <= e.line <= 7
    assert "expands to more than" in e.message


def test_recursive_alias() -> None:
    e = error("hosts: &h\n  x: *h\n")
    assert (e.line, e.key) == (2, "hosts.x")
    assert "recursive alias" in e.message


def test_modest_aliases_work_and_errors_point_at_the_alias() -> None:
    config = parse(
        """
        defaults:
          ask_user: {channels: &both [web, two]}
          request_approval: {channels: *both}
        channels:
          web: {type: web}
          two: {type: web}
        """
    )
    assert config.defaults.request_approval.channels == ["web", "two"]
    # an error about the aliased value itself points at the alias; one inside it, at where it is written
    e = error("x: &num 5\nhosts:\n  a: {budget_seconds: 5}\n  b: *num\n")
    assert {(m.line, m.key, m.message) for m in [e, *e.more]} == {
        (
            1,
            "x",
            "unknown key 'x'; valid keys: server, defaults, hosts, channels, people, escalation, agents, "
            "delegations",
        ),
        (4, "hosts.b", "expected a mapping, got 5"),
    }
    e = error("x: &bad {budget_seconds: 0}\nhosts:\n  a: {budget_seconds: 5}\n  b: *bad\n")
    assert (1, "hosts.b.budget_seconds") in {(m.line, m.key) for m in [e, *e.more]}


def test_merge_keys_are_refused() -> None:
    e = error("hosts:\n  a: &a {budget_seconds: 5}\n  b:\n    <<: *a\n")
    assert (e.line, e.key) == (4, "hosts.b")
    assert "merge keys" in e.message


def test_unsafe_tags_are_refused() -> None:
    e = error("server:\n  host: !!python/object/apply:os.system ['echo pwned']\n")
    assert e.line == 2
    e = error("server:\n  http:\n    host: !!python/name:os.system\n")
    assert (e.line, e.key) == (3, "server.http.host")
    assert "constructor" in e.message
    e = error("hosts: !!set {a, b}\n")
    assert (e.line, e.key) == (1, "hosts")


def test_nesting_is_bounded() -> None:
    e = error("hosts: " + "[" * 100 + "]" * 100 + "\n")
    assert e.file == "hitl.yaml"
    assert "nested" in e.message


def test_oversize_file(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    filler = "# " + "x" * 97 + "\n"
    path.write_text(filler * (MAX_BYTES // len(filler) + 1))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: the file is larger than 1 MiB"
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        parse_config("#" * (MAX_BYTES + 1), source="hitl.yaml")
    # just under the limit is fine
    path.write_text(filler * (MAX_BYTES // len(filler) - 1))
    assert load_config(path).channel_names() == ["web", "elicitation"]


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "hitl.yaml"
    path.write_bytes(b"server:\n  log_level: \xff\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert (info.value.file, info.value.line) == (str(path), 2)


# ---------------------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("2.5", 2.5),
        ("90s", 90.0),
        ("10m", 600.0),
        ("24h", 86400.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("2d", 172800.0),
        ("1d2h3m4s", 93784.0),
        ("0.5h", 1800.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value", ["soon", "", "1x", "30m1h", "1h1h", "-", "h", True, None, [1], "inf", "nan"]
)
def test_parse_duration_rejects(value: object) -> None:
    with pytest.raises(
        ValueError, match="expected a duration such as 90s, 10m, 24h or a number of seconds, got"
    ):
        parse_duration(value)


def test_parse_duration_message() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration("soon")
    assert str(info.value) == "expected a duration such as 90s, 10m, 24h or a number of seconds, got 'soon'"


# ---------------------------------------------------------------------------------------- state dir


def test_resolve_state_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = parse("server:\n  state_dir: /from/config\n")
    env = {"HITL_STATE_DIR": "/from/env"}
    assert resolve_state_dir(config, "/from/cli", env) == Path("/from/cli")
    assert resolve_state_dir(config, None, env) == Path("/from/env")
    assert resolve_state_dir(config, None, {}) == Path("/from/config")
    assert resolve_state_dir(load_config(None), None, {}) == tmp_path / "home" / ".local/state/hitl-mcp"
    assert resolve_state_dir(load_config(None), None, {"XDG_STATE_HOME": "/xdg"}) == Path("/xdg/hitl-mcp")
    assert resolve_state_dir(load_config(None), "~/cli", {}) == tmp_path / "home" / "cli"
    assert resolve_state_dir(load_config(None), None, {"HITL_STATE_DIR": "~/e"}) == tmp_path / "home" / "e"
    assert not (tmp_path / "home").exists()  # nothing is created
    monkeypatch.setenv("HITL_STATE_DIR", "/from/os-environ")
    assert resolve_state_dir(config) == Path("/from/os-environ")


def test_state_dir_from_config_expands_user_and_is_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_state_dir(parse("server: {state_dir: ~/st}"), None, {}) == tmp_path / "home" / "st"
    path = tmp_path / "etc" / "hitl.yaml"
    path.parent.mkdir()
    path.write_text("server:\n  state_dir: state\n")
    assert resolve_state_dir(load_config(path), None, {}) == tmp_path / "etc" / "state"


def test_the_effective_config_says_a_store_url_without_its_password() -> None:
    config = parse("server:\n  store: postgresql://app:hunter2@db:5432/hitl?sslpassword=x\n")
    assert effective_config(config)["server"]["store"] == "postgresql://app:***@db:5432/hitl"


def test_oauth_needs_a_public_url_and_an_issuer_that_is_builtin_or_a_url() -> None:
    config = parse("server: {public_url: 'https://hitl.example.com', oauth: {issuer: builtin}}")
    assert config.server.oauth is not None and config.server.oauth.builtin
    assert config.server.oauth.access_token_ttl == 3600 and config.server.oauth.leeway == 30
    assert "server.oauth needs server.public_url" in str(error("server: {oauth: {issuer: builtin}}"))
    message = str(error("server: {public_url: 'https://h.example.com', oauth: {issuer: 'idp.example.com'}}"))
    assert "server.oauth.issuer: expected an http:// or https:// URL" in message
    secret = "s3cret-value-0123456789"
    config = parse(
        "server: {public_url: 'https://h.example.com', oauth: {issuer: 'https://idp.example.com/realms/t',"
        f" introspection: {{url: 'https://idp.example.com/i', client_id: hitl, client_secret: {secret}}}}}}}"
    )
    assert config.server.oauth is not None and config.server.oauth.introspection is not None
    assert secret not in repr(config)


def test_a_person_may_have_an_oauth_identity_and_no_other_unknown_key() -> None:
    config = parse("people:\n  ana: {oauth: 'f3b2c9e0', web: ana}\n")
    assert config.people["ana"]["oauth"] == "f3b2c9e0"
    assert "people.ana.oath: unknown channel 'oath'" in str(error("people:\n  ana: {oath: 'x'}\n"))


def test_web_push_takes_true_and_only_web_push_does() -> None:
    push = "channels:\n  web: {type: web}\n  push: {type: webpush}\n"
    config = parse(push + "people:\n  ana: {push: true, web: ana}\n")
    assert config.people["ana"]["push"] == "on"
    assert "people.ana.push: 'push' takes true" in str(error(push + "people:\n  ana: {push: ana}\n"))
    said = str(error(push + "people:\n  ana: {web: true}\n"))
    assert "people.ana.web: true is only for a webpush channel" in said
