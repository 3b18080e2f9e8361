"""The gate's policy file (``gate/policy.py``): matching, templates, and errors with line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.config import MAX_BYTES, ConfigError
from hitl_mcp.gate.hints import ToolHints, hints_of
from hitl_mcp.gate.paths import lookup
from hitl_mcp.gate.policy import describe, load_policy, parse_policy
from hitl_mcp.gate.previews import PreviewRule

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
    allowed = policy.decide("get_time", {})
    assert (allowed.action, allowed.rule, allowed.description) == ("allow", 0, "Call the tool `get_time`")
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
    # only a refusal carries a reason
    assert parse_policy("default: ask\n").decide("x", {}).reason is None
    assert parse_policy("default: allow\n").decide("x", {}).reason is None


CHANNELED = """
channels: [slack]
timeout_seconds: 600
rules:
  - tools: [deploy]
    action: ask
    channels: [pager]
    timeout_seconds: 60
    preview: {kind: sql, argument: statement, dialect: postgres}
  - tools: [restart]
    action: ask
"""


def test_a_rules_channels_timeout_and_preview_else_the_policys() -> None:
    policy = parse_policy(CHANNELED, "gate.yaml")
    deploy = policy.decide("deploy", {"statement": "select 1"})
    assert (deploy.channels, deploy.timeout_seconds) == (["pager"], 60)
    assert deploy.preview == PreviewRule(kind="sql", argument="statement", dialect="postgres")
    assert deploy.description == "Call the tool `deploy`"
    # a rule that names none: the policy's own
    restart = policy.decide("restart", {})
    assert (restart.channels, restart.timeout_seconds, restart.preview, restart.rule) == (
        ["slack"],
        600,
        None,
        1,
    )
    # no rule matches: the default, with the policy's channels and timeout too
    other = policy.decide("other", {"x": 1})
    assert (other.action, other.rule, other.channels, other.timeout_seconds) == ("ask", None, ["slack"], 600)
    assert other.description == "Call the tool `other`"
    bare = parse_policy("rules:\n  - {tools: [a], action: ask}\n")
    assert (bare.decide("a", {}).channels, bare.decide("a", {}).timeout_seconds) == (None, None)
    assert (bare.decide("b", {}).channels, bare.decide("b", {}).timeout_seconds) == (None, None)


def test_a_policy_file_never_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HITL_GATE_WHO", "from the environment")
    policy = parse_policy(
        "rules:\n  - tools: [a]\n    action: deny\n    reason: ${HITL_GATE_WHO:-as written}\n"
    )
    assert policy.decide("a", {}).reason == "as written"


def test_every_problem_is_reported_first_in_file_order() -> None:
    # the model checks default before rules; the person reads them in the order of the file
    text = "rules:\n  - tools: [a]\n    action: maybe\ndefault: never\n"
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "gate.yaml")
    assert str(caught.value).startswith("gate.yaml:3: rules[0].action: expected"), str(caught.value)
    assert [str(e).split(",")[0] for e in caught.value.more] == ["gate.yaml:4: default: expected 'allow'"]


def test_matches_reads_non_text_values_as_json() -> None:
    policy = parse_policy('rules:\n  - {tools: ["*"], when: [{path: n, matches: "^4"}], action: deny}\n')
    assert policy.decide("t", {"n": 42}).action == "deny"
    assert policy.decide("t", {"n": 7}).action == "ask"


def test_a_regex_reads_an_object_with_sorted_keys_and_text_as_written() -> None:
    policy = parse_policy(
        r"""
rules:
  - tools: [t]
    when: [{path: options, matches: '^\{"force": true, "target": "prod"\}$'}]
    action: deny
  - tools: [t]
    when: [{path: names, matches: '"café"'}]
    action: deny
"""
    )
    # the same arguments decide the same way, whatever order the agent sent the keys in
    assert policy.decide("t", {"options": {"target": "prod", "force": True}}).action == "deny"
    assert policy.decide("t", {"options": {"force": True, "target": "prod"}}).action == "deny"
    assert policy.decide("t", {"options": {"force": False, "target": "prod"}}).action == "ask"
    # text in a list or object is matched as written, not as \u escapes
    assert policy.decide("t", {"names": ["menu", "café"]}).action == "deny"
    assert policy.decide("t", {"names": ["menu"]}).action == "ask"


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
        (
            "- tools: [a]\n",
            "gate.yaml:1: the top level must be a mapping of keys (default, unannotated, read_only, "
            "risk, risk_metadata, elicitation, sampling, channels, timeout_seconds, rules), got a list",
        ),
    ],
)
def test_errors_name_file_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "gate.yaml")
    assert str(caught.value).startswith(expected), str(caught.value)


def test_load_policy_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    with pytest.raises(ConfigError) as caught:
        load_policy(str(path))
    assert str(caught.value) == f"{path}: no such policy file"
    path.write_text("default: allow\n")
    loaded = load_policy(path)
    assert (loaded.default, loaded.source) == ("allow", path.absolute())
    path.write_bytes(b"\xef\xbb\xbfdefault: deny\n")  # a byte order mark is not part of the text
    assert load_policy(path).default == "deny"


def test_a_policy_file_over_the_limit_is_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    head = b"default: allow\n#"
    path.write_bytes(head + b"x" * (MAX_BYTES - len(head) - 1) + b"\n")  # at the limit: read
    assert load_policy(path).default == "allow"
    over = [
        head + b"x" * MAX_BYTES,
        # with a byte order mark: not read up to the limit and the rules after it left out
        b"\xef\xbb\xbf"
        + head
        + b"x" * (MAX_BYTES - len(head) - 2)
        + b"\nrules: [{tools: [a], action: deny}]\n",
        # the limit cuts an "é" in two: still too large, not "invalid UTF-8"
        head + b"x" * (MAX_BYTES - len(head)) + "é".encode(),
    ]
    for data in over:
        path.write_bytes(data)
        with pytest.raises(ConfigError) as caught:
            load_policy(path)
        assert str(caught.value) == f"{path}: the file is larger than 1 MiB"


def test_load_policy_names_the_file_in_every_error(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text("default: allow\nrules:\n  - tools: [a]\n    action: maybe\n")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert str(caught.value).startswith(f"{path}:4: rules[0].action: expected"), str(caught.value)
    path.write_bytes(b"default: allow\nrules:\n  - tools: [caf\xe9]\n    action: ask\n")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert str(caught.value) == f"{path}:3: not valid UTF-8 text"
    with pytest.raises(ConfigError) as caught:
        load_policy(tmp_path)  # a folder, not a file
    assert str(caught.value) == f"{tmp_path}: cannot be read: Is a directory"


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
    assert (refused.action, refused.reason) == ("deny", "the tool gives no hints, and unannotated is deny")
    # a default of deny refuses an unannotated tool for that reason, not for its lack of hints
    assert parse_policy("default: deny\n").decide("x", {}, bare).reason == "no rule allows it"
    no_reading = parse_policy("default: allow\nread_only: deny\n").decide("x", {}, reader)
    assert (no_reading.action, no_reading.reason) == ("deny", "a read-only tool, and read_only is deny")
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
    by_rule = given.decide("drop", {}, proposed)
    assert by_rule.approvals is not None and by_rule.approvals.required == 1  # the rule's own quorum
    assert (by_rule.rule, by_rule.risk, by_rule.proposal) == (
        0,
        "high",
        "riskLevel critical, approvalRecommendation multi",
    )
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
