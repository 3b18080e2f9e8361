"""The gate's policy file (``gate/policy.py``): matching, templates, and errors with line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.config import ConfigError
from hitl_mcp.gate.policy import describe, load_policy, lookup, parse_policy

POLICY = """
default: ask
risk: low
rules:
  - tools: [get_*, "list_?"]
    action: allow
  - tools: run
    when:
      - {path: $.command, matches: "^rm\\\\b"}
      - {path: options.cwd, equals: /}
    action: deny
    reason: never the root
  - tools: [run]
    when: [{path: "files[1]", equals: secret.env}]
    action: deny
  - tools: ["*"]
    action: ask
    risk: high
    to: [owner]
    escalation: night
    description: "Run `{{ arguments.command }}` in {{ arguments.options.cwd }}"
"""


def test_first_matching_rule_decides() -> None:
    policy = parse_policy(POLICY, "gate.yaml")
    assert policy.decide("get_time", {}).action == "allow"
    assert policy.decide("list_a", {}).action == "allow"
    assert policy.decide("list_ab", {}).action == "ask"  # ? is one character
    root = policy.decide("run", {"command": "rm -rf x", "options": {"cwd": "/"}})
    assert (root.action, root.reason, root.rule) == ("deny", "never the root", 1)
    # both conditions must hold: the same command elsewhere is asked about
    elsewhere = policy.decide("run", {"command": "rm -rf x", "options": {"cwd": "/tmp"}})
    assert (elsewhere.action, elsewhere.risk, elsewhere.to, elsewhere.escalation) == (
        "ask",
        "high",
        ["owner"],
        "night",
    )
    assert elsewhere.description == "Run `rm -rf x` in /tmp"
    assert policy.decide("run", {"files": ["a", "secret.env"]}).action == "deny"
    assert policy.decide("run", {"files": ["secret.env"]}).action == "ask"  # a missing index fails


def test_unmatched_tools_get_the_default_ask_unless_set() -> None:
    assert parse_policy("rules: []\n").decide("anything", {}).action == "ask"
    denied = parse_policy("default: deny\n").decide("anything", {})
    assert (denied.action, denied.reason, denied.rule) == ("deny", "no rule allows it", None)
    assert parse_policy("").decide("x", {}).description == "Call the tool `x`"


def test_matches_reads_non_text_values_as_json() -> None:
    policy = parse_policy('rules:\n  - {tools: ["*"], when: [{path: n, matches: "^4"}], action: deny}\n')
    assert policy.decide("t", {"n": 42}).action == "deny"
    assert policy.decide("t", {"n": 7}).action == "ask"


def test_lookup_paths() -> None:
    data = {"a": {"b": [{"c": 1}]}}
    assert lookup(data, "a.b[0].c") == (True, 1)
    assert lookup(data, "$.a.b[0].c") == (True, 1)
    assert lookup(data, "a.b[1].c") == (False, None)
    assert lookup(data, "a.x") == (False, None)


def test_templates_are_sandboxed_and_fall_back() -> None:
    escape = "{{ arguments.__class__.__mro__[1].__subclasses__() }}"
    assert describe(escape, "t", {}) == "Call the tool `t`"
    assert describe("{{ arguments.missing.deeper }}!", "t", {}) == "!"
    assert describe("{{ tool }} {{ arguments.x }}", "t", {"x": "<b>"}) == "t <b>"  # text, not HTML


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "rules:\n  - tools: [a]\n    action: maybe\n",
            "gate.yaml:3: rules[0].action: expected 'allow', 'ask' or 'deny'",
        ),
        (
            "rules:\n  - tools: [a]\n    action: ask\n    when:\n      - {path: x, matches: '('}\n",
            "gate.yaml:5: rules[0].when[0].matches: not a valid regular expression",
        ),
        (
            "rules:\n  - tools: [a]\n    action: ask\n    when: [{path: x}]\n",
            "gate.yaml:4: rules[0].when[0]: give one of matches (a regex) or equals (a value)",
        ),
        (
            "colour: red\n",
            "gate.yaml:1: colour: unknown key 'colour'; valid keys: default, unannotated, read_only, "
            "risk, risk_metadata, elicitation, sampling, channels, timeout_seconds, rules",
        ),
        (
            "rules:\n  - tools: [a]\n    action: ask\n    description: '{{ x '\n",
            "gate.yaml:4: rules[0].description: not a valid template",
        ),
        ("rules:\n  - action: ask\n", "gate.yaml:2: rules[0].tools: a required key is missing"),
        ("rules: [\n", "gate.yaml:2:"),
    ],
)
def test_errors_name_file_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "gate.yaml")
    assert str(caught.value).startswith(expected), str(caught.value)


def test_load_policy_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    with pytest.raises(ConfigError, match="no such policy file"):
        load_policy(path)
    path.write_text("default: allow\n")
    assert load_policy(path).default == "allow"
