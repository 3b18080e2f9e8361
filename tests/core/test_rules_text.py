"""A rule's text as people and programs read it, and the checks on what a person writes: the names
and patterns ``rules add`` and the inbox's form take, the words a listing shows (``pattern_words``,
``binds_words``), the JSON the API gives (``rule_json``), and the rule an "Approve & remember" makes
(``exactly``). Each expected value is written out whole: a listing that changes its words is a
change a person sees."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from hitl_mcp.core import rules
from hitl_mcp.core.models import Kind, Request
from hitl_mcp.core.records import RuleRow

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def exact(text: str) -> str:
    """``pytest.raises``'s ``match`` for exactly this message."""
    return "^" + re.escape(text) + "$"


def rule(**changes: Any) -> RuleRow:
    fields: dict[str, Any] = {
        "id": 7,
        "agent": "stdio:claude-code",
        "tool": "deploy",
        "arguments": None,
        "high_risk": False,
        "created_by": "alice",
        "created_at": T0,
        "expires_at": None,
        "uses_left": None,
        "fired": 0,
        "revoked_at": None,
        "revoked_by": None,
        "shown": None,
        "max_risk": None,
    }
    return RuleRow(**{**fields, **changes})


# --- names ---------------------------------------------------------------------------------------


def test_a_name_is_stripped_and_printable_text() -> None:
    assert rules.check_name("tool", "  deploy*  ") == "deploy*"
    assert rules.check_name("tool", "café\u00a0bar") == "café\u00a0bar"  # U+00A0: printable
    assert rules.check_name("tool", "~") == "~"  # U+007E, the last before DEL
    with pytest.raises(ValueError, match=exact("the tool is empty")):
        rules.check_name("tool", " \t ")
    with pytest.raises(ValueError, match=exact("the agent is empty")):
        rules.check_name("agent", "")


@pytest.mark.parametrize(
    "char",
    ["\x00", "\x1f", "\x7f", "\x9f", "\u202a", "\u202e", "\u2066", "\u2069"],
    ids=lambda c: f"U+{ord(c):04X}",
)
def test_a_name_with_a_control_or_bidi_character_is_refused_naming_it(char: str) -> None:
    with pytest.raises(ValueError) as refused:
        rules.check_name("tool", f"dep{char}loy")
    assert str(refused.value) == (
        f"the tool has a control character (U+{ord(char):04X}); it must be printable"
    )


@pytest.mark.parametrize("char", ["\x20", "\xa0", "\u2029", "\u202f", "\u2065", "\u206a", "\ud7ff", "\ue000"])
def test_the_characters_just_outside_the_refused_ranges_are_taken(char: str) -> None:
    assert rules.check_name("tool", f"a{char}b") == f"a{char}b"


def test_a_lone_surrogate_and_a_name_too_long_are_refused() -> None:
    with pytest.raises(ValueError, match=exact("the agent is not valid text (a lone surrogate, U+D800)")):
        rules.check_name("agent", "a\ud800")
    with pytest.raises(ValueError, match=exact("the agent is not valid text (a lone surrogate, U+DFFF)")):
        rules.check_name("agent", "a\udfff")
    longest = "x" * rules.MAX_NAME_CHARS
    assert rules.check_name("tool", longest) == longest
    with pytest.raises(ValueError, match=exact("the tool is longer than 12,000 characters")):
        rules.check_name("tool", longest + "x")


# --- argument patterns ---------------------------------------------------------------------------

VALID = 'null, {"exact": <any JSON>} or {"match": {"<argument>": <JSON value or {"glob": "..."}>}}'


@pytest.mark.parametrize(
    "pattern",
    [None, {"exact": None}, {"exact": [1, "a"]}, {"match": {"a": 1}}, {"match": {"p": {"glob": "x*"}}}],
)
def test_patterns_that_are_patterns_come_back_as_given(pattern: Any) -> None:
    assert rules.check_pattern(pattern) == pattern
    assert rules.load_pattern(json.dumps(pattern)) == pattern


@pytest.mark.parametrize(
    "pattern, said",
    [
        ({}, f"an argument pattern is {VALID}"),
        ({"exact": 1, "match": {}}, f"an argument pattern is {VALID}"),
        ({"glob": "x"}, f"an argument pattern is {VALID}"),
        ([], f"an argument pattern is {VALID}"),
        ("exact", f"an argument pattern is {VALID}"),
        ({"match": {}}, f'"match" takes an object of argument conditions; an argument pattern is {VALID}'),
        ({"match": [1]}, f'"match" takes an object of argument conditions; an argument pattern is {VALID}'),
        (
            {"match": {"a": {"glob": 1}}},
            """the condition on 'a' is an object: it must be {"glob": "<pattern>"}""",
        ),
        (
            {"match": {"a": {"glob": "x", "b": 1}}},
            """the condition on 'a' is an object: it must be {"glob": "<pattern>"}""",
        ),
        ({"match": {"a": {}}}, """the condition on 'a' is an object: it must be {"glob": "<pattern>"}"""),
        # what a Python caller of Broker.add_rule may hand over that JSON cannot hold: a set
        ({"exact": {"tags": {"a", "b"}}}, f"an argument pattern is JSON: {VALID}"),
    ],
)
def test_what_is_not_a_pattern_says_what_would_be(pattern: Any, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        rules.check_pattern(pattern)
    assert str(refused.value) == said


def test_a_pattern_nested_exactly_as_deep_as_allowed_is_taken_one_more_is_not() -> None:
    def nest(levels: int) -> Any:
        value: Any = 1
        for _ in range(levels - 1):
            value = [value]
        return {"exact": value}

    assert rules.check_pattern(nest(rules.MAX_PATTERN_DEPTH)) is not None
    with pytest.raises(ValueError, match=exact("the argument pattern is nested more than 100 levels deep")):
        rules.check_pattern(nest(rules.MAX_PATTERN_DEPTH + 1))
    with pytest.raises(ValueError, match=exact("the argument pattern is nested more than 100 levels deep")):
        rules.load_pattern("[" * 5000 + "]" * 5000)


def test_a_pattern_too_long_and_text_that_is_not_json_are_refused() -> None:
    under = {"exact": "x" * (rules.MAX_PATTERN_CHARS - len('{"exact":""}'))}
    assert rules.check_pattern(under) == under
    over = {"exact": "x" * rules.MAX_PATTERN_CHARS}
    with pytest.raises(
        ValueError, match=exact("the argument pattern is longer than 70,000 characters of JSON")
    ):
        rules.check_pattern(over)
    with pytest.raises(
        ValueError, match=exact("the argument pattern is longer than 70,000 characters of JSON")
    ):
        rules.load_pattern(" " * (4 * rules.MAX_PATTERN_CHARS + 1))
    # JSON text up to four times the limit is read (indented, say): its canonical form is what counts
    padded = '{"exact": 1}' + " " * (4 * rules.MAX_PATTERN_CHARS - len('{"exact": 1}'))
    assert rules.load_pattern(padded) == {"exact": 1}
    with pytest.raises(
        ValueError, match=exact("the argument pattern is not JSON: Expecting value at character 0")
    ):
        rules.load_pattern("nope")


def test_arguments_fit_a_pattern() -> None:
    assert rules.arguments_fit(None, {"any": 1})
    assert rules.arguments_fit({"exact": {"a": 1, "b": 2}}, {"b": 2, "a": 1})
    assert not rules.arguments_fit({"exact": {"a": 1}}, {"a": 1, "b": 2})
    match = {"match": {"env": "prod", "path": {"glob": "/srv/*"}}}
    assert rules.arguments_fit(match, {"env": "prod", "path": "/srv/a", "other": True})
    assert not rules.arguments_fit(match, {"env": "prod", "path": "/etc/a"})
    assert not rules.arguments_fit(match, {"env": "dev", "path": "/srv/a"})
    assert not rules.arguments_fit(match, {"path": "/srv/a"})  # a named argument must be there
    assert not rules.arguments_fit(match, {"env": "prod", "path": 3})  # a glob fits strings only
    assert not rules.arguments_fit(match, ["prod"])
    assert not rules.arguments_fit({"match": {"p": {"glob": "A*"}}}, {"p": "a1"})  # case-sensitive


# --- the words a rule binds, and its risk ------------------------------------------------------


def test_shown_and_max_risk_are_checked() -> None:
    assert rules.check_shown(None) is None
    assert rules.check_shown({"details": None, "text": "x"}) == {"details": None, "text": "x"}
    every = {"text": "Run `ls`", "details": None, "context": "in /srv"}  # what a gated call's rule binds
    assert rules.check_shown(every) == every
    for bad in ([], {"title": "x"}, {"details": 3}):
        with pytest.raises(
            ValueError, match=exact("the words a rule binds are null or an object of text, details, context")
        ):
            rules.check_shown(bad)
    assert rules.check_max_risk(None, False) is None
    assert rules.check_max_risk("medium", False) == "medium"
    assert rules.check_max_risk("high", True) == "high"
    with pytest.raises(ValueError, match=exact("a rule's highest risk is one of low, medium, high")):
        rules.check_max_risk("critical", True)
    with pytest.raises(
        ValueError, match=exact("a rule up to high risk must say it approves high-risk calls")
    ):
        rules.check_max_risk("high", False)


# --- what a listing says -------------------------------------------------------------------------


def test_pattern_words() -> None:
    assert rules.pattern_words(None) == "any arguments"
    assert rules.pattern_words({"exact": {"b": 1, "a": "x"}}) == 'exactly {"a":"x","b":1}'
    assert (
        rules.pattern_words({"match": {"env": "prod", "path": {"glob": "/srv/*"}, "n": 2}})
        == 'where env = "prod", path ~ /srv/*, n = 2'
    )


def test_binds_words() -> None:
    assert rules.binds_words(rule()) == "any details; any risk but high"
    assert rules.binds_words(rule(high_risk=True)) == "any details; any risk"
    assert rules.binds_words(rule(shown={}, max_risk="low")) == "any details; risk up to low"
    shown = {"context": "from the CI", "details": None, "text": "Deploy v3"}
    assert (
        rules.binds_words(rule(shown=shown, max_risk="medium"))
        == 'text "Deploy v3", no details, context "from the CI"; risk up to medium'
    )
    long = "é" * 100
    assert rules.binds_words(rule(shown={"details": long})) == (
        'details "' + "\\u00e9" * 79 + '\\u2026"; any risk but high'
    )
    assert rules.binds_words(rule(shown={"details": "é" * 80})) == (
        'details "' + "\\u00e9" * 80 + '"; any risk but high'
    )


def test_rule_json_is_the_rule_whole_with_its_words_and_life() -> None:
    made = rule(
        arguments={"exact": {"tag": "v3"}},
        shown={"details": None},
        max_risk="medium",
        expires_at=T0 + 3600,
        uses_left=2,
        fired=1,
    )
    assert rules.rule_json(made, T0) == {
        "id": 7,
        "agent": "stdio:claude-code",
        "tool": "deploy",
        "arguments": {"exact": {"tag": "v3"}},
        "high_risk": False,
        "shown": {"details": None},
        "max_risk": "medium",
        "binds": "no details; risk up to medium",
        "created_by": "alice",
        "created_at": "2026-01-01T00:00:00.000Z",
        "expires_at": "2026-01-01T01:00:00.000Z",
        "uses_left": 2,
        "fired": 1,
        "revoked_at": None,
        "revoked_by": None,
        "live": True,
    }
    revoked = rules.rule_json(rule(revoked_at=T0 + 5, revoked_by="bob"), T0 + 10)
    assert (revoked["revoked_at"], revoked["revoked_by"], revoked["live"]) == (
        "2026-01-01T00:00:05.000Z",
        "bob",
        False,
    )
    assert rules.rule_json(rule(expires_at=T0), T0)["live"] is False


def test_rule_of_reads_the_id_of_the_rule_that_answered() -> None:
    assert rules.rule_of("rule 7", "rule") == 7
    assert rules.rule_of("rule 7", "web") is None
    assert rules.rule_of("rule x", "rule") is None
    assert rules.rule_of("rules 7", "rule") is None
    assert rules.rule_of(None, "rule") is None
    assert rules.rule_of("", "rule") is None


def test_ids_as_written() -> None:
    assert rules.rule_id("12") == 12
    assert rules.rule_id(" 12 ") == 12
    assert rules.rule_id(str(rules.MAX_RULE_ID)) == rules.MAX_RULE_ID
    for bad in ("0", "-1", "1.5", "²", "٣", str(rules.MAX_RULE_ID + 1), "9" * 30, ""):
        assert rules.rule_id(bad) is None, bad
    with pytest.raises(
        ValueError, match=exact("uses is a whole number from 1 to 1,000,000, in the digits 0-9")
    ):
        rules.whole("1000001", "uses", rules.MAX_USES)
    assert rules.whole("1000000", "uses", rules.MAX_USES) == 1_000_000
    assert rules.shown_id("x" * 24) == "x" * 24
    assert rules.shown_id("x" * 25) == "x" * 20 + "…"


# --- Approve & remember ---------------------------------------------------------------------------


def request(**changes: Any) -> Request:
    fields: dict[str, Any] = {
        "id": "r" * 16,
        "kind": Kind.APPROVAL,
        "text": "Deploy v3",
        "owner": "agent:ci",
        "created_at": T0,
    }
    return Request(**{**fields, **changes})


def test_exactly_binds_what_the_person_saw() -> None:
    assert rules.exactly(request(payload={"tag": "v3"}, details="to prod", risk="medium")) == {
        "agent": "agent:ci",
        "tool": "Deploy v3",
        "arguments": {"exact": {"tag": "v3"}},
        "shown": {"details": "to prod", "context": None},
        "max_risk": "medium",
        "high_risk": False,
    }
    gated = request(
        text="Run `rm *.log`",
        payload={"tool": "Bash[1]?", "arguments": {"command": "rm *.log"}},
        risk="high",
        context="in /srv",
    )
    assert rules.exactly(gated) == {
        "agent": "agent:ci",
        "tool": "Bash[[]1][?]",  # escaped: it matches only this tool
        "arguments": {"exact": {"command": "rm *.log"}},
        "shown": {"text": "Run `rm *.log`", "details": None, "context": "in /srv"},
        "max_risk": "high",
        "high_risk": True,
    }
    assert rules.exactly(request(title="Deploy"))["shown"] == {
        "text": "Deploy v3",
        "details": None,
        "context": None,
    }
    assert rules.exactly(request())["max_risk"] == "low"  # no risk stated counts as low
    assert rules.unescape("Bash[[]1][?][*]") == "Bash[1]?*"
