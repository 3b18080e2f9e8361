"""The gate's policy file (``gate/policy.py``): matching, templates, and errors with line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.config import ConfigError
from hitl_mcp.gate.hints import ToolHints, hints_of
from hitl_mcp.gate.paths import lookup
from hitl_mcp.gate.policy import describe, load_policy, parse_policy

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


# --- tool hints and the risk metadata proposal -------------------------------------------------------

HINTED = """
default: allow
rules:
  - tools: ["*"]
    hints: {destructiveHint: true}
    action: ask
    risk: high
  - tools: ["*"]
    hints: {openWorldHint: true, readOnlyHint: false}
    action: deny
    reason: reaches out
"""


def test_hint_conditions_read_the_tools_annotations_with_mcps_defaults() -> None:
    policy = parse_policy(HINTED, "gate.yaml")
    destructive = ToolHints(declared={"destructiveHint": True, "openWorldHint": False})
    assert (policy.decide("drop", {}, destructive).action, policy.decide("drop", {}, destructive).risk) == (
        "ask",
        "high",
    )
    # a hint the tool does not give is MCP's default: destructiveHint true, openWorldHint true
    assert policy.decide("write", {}, ToolHints(declared={"readOnlyHint": False})).rule == 0
    additive = ToolHints(declared={"destructiveHint": False})
    assert (policy.decide("add", {}, additive).action, policy.decide("add", {}, additive).rule) == ("deny", 1)
    # a read-only tool is neither destructive nor (by its own word) open-world here
    reader = ToolHints(declared={"readOnlyHint": True, "openWorldHint": False})
    assert (policy.decide("read", {}, reader).action, policy.decide("read", {}, reader).rule) == (
        "allow",
        None,
    )
    # a hook knows no annotations: hint rules never apply there
    assert policy.decide("drop", {}, None).action == "allow"


def test_unannotated_tools_are_asked_and_read_only_ones_take_the_policys_choice() -> None:
    bare, reader = ToolHints(), ToolHints(declared={"readOnlyHint": True})
    titled_only = hints_of({"name": "t", "annotations": {"title": "T"}})
    assert not titled_only.annotated
    lenient = parse_policy("default: allow\n")
    assert lenient.decide("x", {}, bare).action == "ask"  # default allow, but nothing is known of it
    assert lenient.decide("x", {}, titled_only).action == "ask"
    assert lenient.decide("x", {}, None).action == "allow"  # a hook: no annotations to go by
    assert parse_policy("default: deny\n").decide("x", {}, bare).action == "deny"
    chosen = parse_policy("default: ask\nread_only: allow\nunannotated: deny\n")
    assert chosen.decide("x", {}, reader).action == "allow"
    refused = chosen.decide("x", {}, bare)
    assert refused.action == "deny" and "gives no hints" in (refused.reason or "")
    assert parse_policy("default: ask\n").decide("x", {}, reader).action == "ask"  # unset: the default


def test_the_risk_metadata_proposal_raises_risk_and_asks_for_a_quorum_never_lowers() -> None:
    proposed = hints_of(
        {"annotations": {"readOnlyHint": False, "riskLevel": "critical", "approvalRecommendation": "multi"}}
    )
    decision = parse_policy("default: ask\nrisk: low\n").decide("drop", {}, proposed)
    assert decision.risk == "high" and decision.approvals is not None and decision.approvals.required == 2
    assert decision.proposal == "riskLevel critical, approvalRecommendation multi"
    low = hints_of({"annotations": {"readOnlyHint": False, "riskLevel": "low"}})
    assert parse_policy("risk: high\n").decide("x", {}, low).risk == "high"
    given = parse_policy("rules:\n  - tools: [drop]\n    action: ask\n    approvals: {required: 1}\n")
    assert given.decide("drop", {}, proposed).approvals.required == 1  # type: ignore[union-attr]
    ignored = parse_policy("risk: low\nrisk_metadata: ignore\n").decide("drop", {}, proposed)
    assert (ignored.risk, ignored.approvals, ignored.proposal) == ("low", None, None)
    assert parse_policy("default: allow\n").decide("drop", {}, proposed).action == "allow"  # never the action


def test_a_hint_condition_names_one_of_mcps_hints() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy("rules:\n  - tools: [a]\n    hints: {dangerous: true}\n    action: ask\n", "gate.yaml")
    assert str(caught.value).startswith(
        "gate.yaml:3: rules[0].hints.dangerous: expected 'readOnlyHint', 'destructiveHint', "
        "'idempotentHint' or 'openWorldHint'"
    ), str(caught.value)
