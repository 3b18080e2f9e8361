"""The ``people:`` and ``escalation:`` config: what a valid ladder reads as, and every mistake named with
its file, line and key."""

from __future__ import annotations

import textwrap

import pytest

from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.config.policy import policy_from_config
from hitl_mcp.core.models import Kind

BOT = "123456789:AAHabcdefghijklmnopqrstuvwxyz0123456"
SECRET = "whsec_a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="
CHANNELS = f"""
channels:
  web: {{type: web}}
  phone: {{type: telegram, bot_token: "{BOT}", chat_id: 4567}}
  mail: {{type: webhook, url: "https://hooks.example.com/hitl", secret: "{SECRET}"}}
"""


def parse(text: str) -> object:
    return parse_config(textwrap.dedent(CHANNELS) + textwrap.dedent(text), source="hitl.yaml", env={})


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(text)
    return info.value


def test_a_ladder_with_people_and_choices() -> None:
    config = parse_config(
        textwrap.dedent(CHANNELS)
        + textwrap.dedent("""
        people:
          owner: {telegram: 4567, web: owner}
          backup: {mail: backup-bot}
        escalation:
          default:
            steps:
              - {after: 0s, notify: [phone]}
              - {after: 15s, notify: [mail], unless: answered}
              - {at: 50%, remind: true}
              - {after: 30m, notify_people: [backup]}
          patient:
            steps: [{after: 1h, remind: true}]
            on_timeout: keep_pending
        defaults:
          ask_user: {escalation: patient, to: [owner]}
          request_approval:
            risk:
              high: {escalation: default, to: [owner, backup]}
        """),
        source="hitl.yaml",
        env={},
    )
    steps = config.escalation["default"].steps
    assert [(s.after, s.at) for s in steps] == [(0, None), (15, None), (None, 0.5), (1800, None)]
    assert config.escalation["patient"].on_timeout == "keep_pending"
    assert config.people["owner"] == {"telegram": "4567", "web": "owner"}  # numbers kept as digits
    policy = policy_from_config(config)
    assert policy.identity("owner", "phone") == "4567"  # by type: every telegram channel
    assert policy.person_of("phone", "4567") == "owner"
    patient, to = policy.choose(Kind.QUESTION, None)
    assert patient is config.escalation["patient"] and to == ["owner"]
    high, to = policy.choose(Kind.APPROVAL, "high")
    assert high is config.escalation["default"] and to == ["owner", "backup"]
    low, to = policy.choose(Kind.APPROVAL, "low")
    assert low is config.escalation["default"] and to == []  # the ladder named default


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            """
            escalation:
              default:
                steps:
                  - {after: 0s, notify: [web]}
                  - {after: 15s, notify: [email]}
            """,
            11,
            "escalation.default.steps[1].notify[0]: unknown channel 'email';"
            " configured channels: web, phone, mail",
        ),
        (
            """
            people:
              owner: {phone: 1}
            escalation:
              default:
                steps:
                  - {after: 30m, notify_people: [backup]}
            """,
            12,
            "escalation.default.steps[0].notify_people[0]: unknown person 'backup'; people: owner",
        ),
        (
            """
            escalation:
              default:
                steps:
                  - {after: 0s, notify: [web]}
                  - {after: soon, remind: true}
            """,
            11,
            "escalation.default.steps[1].after: expected a duration such as 90s, 10m, 24h or a number of "
            "seconds, got 'soon'",
        ),
        (
            """
            escalation:
              default:
                steps:
                  - {at: half, remind: true}
            """,
            10,
            "escalation.default.steps[0].at: expected a share of the window such as 50%, got 'half'",
        ),
        (
            """
            escalation:
              default:
                steps:
                  - {after: 1m, at: 50%, remind: true}
            """,
            10,
            "escalation.default.steps[0]: a step needs one of 'after' (a duration) or 'at' (a share of the "
            "window)",
        ),
        (
            """
            escalation:
              default:
                steps:
                  - {after: 1m, remind: true, notify: [web]}
            """,
            10,
            "escalation.default.steps[0]: a step does one thing: 'notify: [channels]', 'notify_people: "
            "[people]' or 'remind: true'",
        ),
        (
            """
            escalation:
              default:
                steps: [{after: 1m, remind: true}]
                on_timeout: wait
            """,
            10,
            "escalation.default.on_timeout: expected 'expire' or 'keep_pending', got 'wait'",
        ),
        (
            """
            escalation:
              default:
                - {after: 1m, remind: true}
            """,
            8,
            "escalation.default: expected a mapping, got a list",
        ),
        (
            """
            people:
              owner: {slack: U123}
            """,
            8,
            "people.owner.slack: unknown channel 'slack' (a channel name or type, or terminal for the OS "
            "user); configured channels: web, "
            "phone, mail",
        ),
        (
            """
            defaults:
              request_approval:
                risk:
                  high: {escalation: urgent, to: [owner]}
            """,
            10,
            "defaults.request_approval.risk.high.escalation: unknown escalation 'urgent'; ladders: none",
        ),
    ],
)
def test_mistakes_are_named_with_their_line(text: str, line: int, message: str) -> None:
    e = error(text)
    assert str(e) == f"hitl.yaml:{line}: {message}"


def test_allow_lists_may_name_people() -> None:
    config = parse_config(
        textwrap.dedent(f"""
        people:
          owner: {{telegram: 4567}}
          backup: {{phone: 8910}}
        channels:
          web: {{type: web}}
          phone: {{type: telegram, bot_token: "{BOT}", chat_id: 4567, allowed_users: [owner, backup, 1112]}}
        """),
        source="hitl.yaml",
        env={},
    )
    assert config.channels["phone"].allowed_users == [4567, 8910, 1112]  # type: ignore[attr-defined]


def test_a_person_without_an_identity_on_that_channel_cannot_be_allowed() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            textwrap.dedent(f"""
            people:
              owner: {{web: me}}
            channels:
              web: {{type: web}}
              phone: {{type: telegram, bot_token: "{BOT}", chat_id: 4567, allowed_users: [owner]}}
            """),
            source="hitl.yaml",
            env={},
        )
    assert str(info.value) == (
        "hitl.yaml:6: channels.phone.allowed_users[0]: person 'owner' has no identity on channel 'phone'"
    )


def test_the_worked_example_in_the_docs_is_a_valid_config() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "escalation.md").read_text()
    example = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    env = {
        "NTFY_TOPIC": "hitl-x",
        "TELEGRAM_BOT_TOKEN": BOT,
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_APP_TOKEN": "xapp-1",
    }
    config = parse_config(example, source="escalation.md", env=env)
    assert config.channels["ops"].allowed_users == ["U042", "U077"]  # type: ignore[attr-defined]
    assert list(config.escalation) == ["default", "patient"]
