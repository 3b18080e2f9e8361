"""Remembered answers: what a rule matches, and the rule a one-tap "Approve & remember" makes.

A rule (``store.base.RuleRow``) answers an approval without asking anyone when all of these hold:

- **agent**: the request's owner (the principal that asked, ``principal.Principal.owner``)
  equals the rule's ``agent``, or the rule's ``agent`` is ``*``;
- **tool**: the approval's *subject* fits the rule's ``tool``, a case-sensitive glob (``fnmatch``:
  ``*``, ``?``, ``[...]``). The subject of a gated call (the proxy's and the hooks' payload
  ``{"tool": ..., "arguments": {...}}``) is the tool's name; of any other approval, its title, else
  its action text. Rules made from a request store the subject escaped, so they match only it;
- **arguments**: the gated call's arguments, else the approval's payload, fit the rule's pattern:
  ``null`` (any), ``{"exact": V}`` (equal to ``V``, compared as canonical JSON, so the same payload
  hash), or ``{"match": {"name": C, ...}}`` (an object whose every named argument fits ``C``: a JSON
  value it must equal, or ``{"glob": "..."}`` for a string; arguments not named are free);
- **risk**: a ``risk: high`` approval only when the rule says ``high_risk``.

Rules answer approvals only: a question is never answered by a rule. A live rule is one not revoked,
not expired, with uses left (``RuleRow.live``).
"""

from __future__ import annotations

import fnmatch
import glob
from typing import TYPE_CHECKING, Any

from hitl_mcp.models import Request, canonical_json

if TYPE_CHECKING:
    from hitl_mcp.store.base import RuleRow

#: the channel name an answer by a rule is recorded under (the responder is "rule <id>")
RULE_CHANNEL = "rule"
#: a rule made with no expiry and no number of uses lasts this long
DEFAULT_HOURS = 24.0
ANY_AGENT = "*"


def subject(text: str, title: str | None, payload: Any) -> tuple[str, Any]:
    """What a rule matches an approval on: (the tool, the arguments)."""
    if (
        isinstance(payload, dict)
        and set(payload) == {"tool", "arguments"}
        and isinstance(payload["tool"], str)
    ):
        return payload["tool"], payload["arguments"]
    return title or text, payload


def check_pattern(pattern: Any) -> Any:
    """The argument pattern, if it is one; else ``ValueError`` saying what would be valid."""
    valid = 'null, {"exact": <any JSON>} or {"match": {"<argument>": <JSON value or {"glob": "..."}>}}'
    if pattern is None:
        return None
    if not isinstance(pattern, dict) or len(pattern) != 1 or next(iter(pattern)) not in ("exact", "match"):
        raise ValueError(f"an argument pattern is {valid}")
    if "match" in pattern:
        conditions = pattern["match"]
        if not isinstance(conditions, dict) or not conditions:
            raise ValueError(
                f'"match" takes an object of argument conditions; an argument pattern is {valid}'
            )
        for name, condition in conditions.items():
            if isinstance(condition, dict) and (
                set(condition) != {"glob"} or not isinstance(condition["glob"], str)
            ):
                raise ValueError(
                    f'the condition on {name!r} is an object: it must be {{"glob": "<pattern>"}}'
                )
    return pattern


def arguments_fit(pattern: Any, arguments: Any) -> bool:
    if pattern is None:
        return True
    if "exact" in pattern:
        return canonical_json(pattern["exact"]) == canonical_json(arguments)
    if not isinstance(arguments, dict):
        return False
    for name, condition in pattern["match"].items():
        if name not in arguments:
            return False
        value = arguments[name]
        if isinstance(condition, dict):
            if not isinstance(value, str) or not fnmatch.fnmatchcase(value, condition["glob"]):
                return False
        elif canonical_json(condition) != canonical_json(value):
            return False
    return True


def matches(rule: RuleRow, owner: str, tool: str, arguments: Any, risk: str | None) -> bool:
    """Whether the rule answers this approval (the rule's own life, ``live``, is checked apart)."""
    if rule.agent not in (ANY_AGENT, owner):
        return False
    if risk == "high" and not rule.high_risk:
        return False
    return fnmatch.fnmatchcase(tool, rule.tool) and arguments_fit(rule.arguments, arguments)


def exactly(request: Request) -> dict[str, Any]:
    """The default rule for a request: this agent, this tool, these exact arguments."""
    tool, arguments = subject(request.text, request.title, request.payload)
    return {"agent": request.owner, "tool": glob.escape(tool), "arguments": {"exact": arguments}}


def unescape(tool: str) -> str:
    """A tool pattern as a person reads it: ``[*]`` shown as ``*`` when the whole is escaped."""
    return tool.replace("[*]", "*").replace("[?]", "?").replace("[[]", "[")


def pattern_words(pattern: Any) -> str:
    """The argument pattern in a few words, for listings."""
    if pattern is None:
        return "any arguments"
    if "exact" in pattern:
        return "exactly " + canonical_json(pattern["exact"])
    return "where " + ", ".join(
        f"{name} ~ {c['glob']}" if isinstance(c, dict) else f"{name} = {canonical_json(c)}"
        for name, c in pattern["match"].items()
    )


def rule_of(responder: str | None, channel: str | None) -> int | None:
    """The id of the rule that answered, from a request's responder (``rule 7`` via ``rule``)."""
    if channel != RULE_CHANNEL or not responder or not responder.startswith("rule "):
        return None
    number = responder.removeprefix("rule ")
    return int(number) if number.isdigit() else None


def rule_json(rule: RuleRow, at: float) -> dict[str, Any]:
    from hitl_mcp.models import iso

    return {
        "id": rule.id,
        "agent": rule.agent,
        "tool": rule.tool,
        "arguments": rule.arguments,
        "high_risk": rule.high_risk,
        "created_by": rule.created_by,
        "created_at": iso(rule.created_at),
        "expires_at": iso(rule.expires_at),
        "uses_left": rule.uses_left,
        "fired": rule.fired,
        "revoked_at": iso(rule.revoked_at),
        "revoked_by": rule.revoked_by,
        "live": rule.live(at),
    }
