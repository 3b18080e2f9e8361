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
- **shown**: the words around the action that the person saw, when the rule binds them (``shown`` is
  an object of ``details``, ``context`` and, when the subject is not the action line itself, ``text``;
  each named one must be equal, ``null`` meaning none). ``null``: any (rules made before rules bound
  them, ``rules add``, and the form's "any details" box);
- **risk**: a ``risk: high`` approval only when the rule says ``high_risk``; and, when the rule has a
  ``max_risk``, a risk no higher than it (an approval that states no risk counts as low). No
  ``max_risk`` (rules made before it, ``rules add``): any risk short of high.

"Approve & remember" binds what the person saw (``exactly``): the action, the arguments, the words
around it and a risk up to the one shown. Rules stored before ``shown`` and ``max_risk`` existed keep
their old, broad meaning: a migration cannot know what the person saw.

Rules answer approvals only: a question is never answered by a rule. A live rule is one not revoked,
not expired, with uses left (``RuleRow.live``).
"""

from __future__ import annotations

import fnmatch
import glob
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hitl_mcp.core.models import Request, canonical_json

if TYPE_CHECKING:
    from hitl_mcp.core.store import RuleRow

#: the channel name an answer by a rule is recorded under (the responder is "rule <id>")
RULE_CHANNEL = "rule"
#: a rule made with no expiry and no number of uses lasts this long
DEFAULT_HOURS = 24.0
ANY_AGENT = "*"
#: the risks, lowest first; an approval that states none counts as the lowest
RISKS = ("low", "medium", "high")
#: the words of an approval a rule may bind (``shown``)
SHOWN_FIELDS = ("text", "details", "context")
#: an argument pattern nests at most this deep and is at most this long (canonical JSON)
MAX_PATTERN_DEPTH = 100
MAX_PATTERN_CHARS = 70_000
#: agents and tool patterns are at most this long
MAX_NAME_CHARS = 12_000  # an action is at most 4,000 characters, each escaped at most in 3
#: the most uses a rule may have; a rule's id is at most this (both engines' 64-bit integers)
MAX_USES = 1_000_000
MAX_RULE_ID = 2**63 - 1


def _number(text: str, most: int) -> int | None:
    """A whole number from 1 to ``most`` written in the digits 0-9, else None (``"²".isdigit()`` and
    ``int("٣")`` are Python's idea of a digit, not a person's)."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(most)) or not 0 < int(text) <= most:
        return None
    return int(text)


def whole(text: str, what: str, most: int) -> int:
    """A whole number from 1 to ``most`` written in the digits 0-9; else ``ValueError`` saying so."""
    number = _number(text, most)
    if number is None:
        raise ValueError(f"{what} is a whole number from 1 to {most:,}, in the digits 0-9")
    return number


def rule_id(text: str) -> int | None:
    """A rule's id as written (a path, an argument), or None when it cannot be one."""
    return _number(text, MAX_RULE_ID)


def shown_id(text: str) -> str:
    """An id as written, short enough for a one-line error."""
    return text if len(text) <= 24 else text[:20] + "…"


def risk_rank(risk: str | None) -> int:
    return RISKS.index(risk) if risk in RISKS else 0


def words(text: str, details: str | None, context: str | None) -> dict[str, str | None]:
    """An approval's words a rule may bind (``shown``), by field."""
    return {"text": text, "details": details, "context": context}


def subject(text: str, title: str | None, payload: Any) -> tuple[str, Any]:
    """What a rule matches an approval on: (the tool, the arguments)."""
    if (
        isinstance(payload, dict)
        and set(payload) == {"tool", "arguments"}
        and isinstance(payload["tool"], str)
    ):
        return payload["tool"], payload["arguments"]
    return title or text, payload


def check_name(what: str, text: str) -> str:
    """An agent or a tool pattern, stripped, if it is printable text (no control characters, no bidi
    overrides that would show it as other than it matches, no lone surrogates); else ``ValueError``."""
    if not text.strip():
        raise ValueError(f"the {what} is empty")
    if len(text) > MAX_NAME_CHARS:
        raise ValueError(f"the {what} is longer than {MAX_NAME_CHARS:,} characters")
    for char in text:
        point = ord(char)
        if 0xD800 <= point <= 0xDFFF:
            raise ValueError(f"the {what} is not valid text (a lone surrogate, U+{point:04X})")
        if point < 0x20 or 0x7F <= point < 0xA0 or 0x202A <= point <= 0x202E or 0x2066 <= point <= 0x2069:
            raise ValueError(f"the {what} has a control character (U+{point:04X}); it must be printable")
    return text.strip()


def load_pattern(text: str) -> Any:
    """An argument pattern written as JSON text; ``ValueError`` saying what is wrong."""
    if len(text) > 4 * MAX_PATTERN_CHARS:
        raise ValueError(f"the argument pattern is longer than {MAX_PATTERN_CHARS:,} characters of JSON")
    try:
        return check_pattern(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the argument pattern is not JSON: {exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise ValueError(_too_deep()) from None


def _too_deep() -> str:
    return f"the argument pattern is nested more than {MAX_PATTERN_DEPTH} levels deep"


def _nested_too_deep(value: Any) -> bool:
    """Whether JSON nests more than ``MAX_PATTERN_DEPTH`` levels (a scalar: none), without recursion;
    stops at the first object or array past the limit."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()  # depth: the objects and arrays around item
        if isinstance(item, dict | list):
            if depth >= MAX_PATTERN_DEPTH:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def check_pattern(pattern: Any) -> Any:
    """The argument pattern, if it is one; else ``ValueError`` saying what would be valid."""
    valid = 'null, {"exact": <any JSON>} or {"match": {"<argument>": <JSON value or {"glob": "..."}>}}'
    if pattern is None:
        return None
    if _nested_too_deep(pattern):
        raise ValueError(_too_deep())
    try:
        size = len(canonical_json(pattern))
    except (TypeError, ValueError):
        raise ValueError(f"an argument pattern is JSON: {valid}") from None
    if size > MAX_PATTERN_CHARS:
        raise ValueError(f"the argument pattern is longer than {MAX_PATTERN_CHARS:,} characters of JSON")
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


def check_shown(shown: Any) -> dict[str, str | None] | None:
    """The words a rule binds, if they are such; else ``ValueError``."""
    if shown is None:
        return None
    if (
        not isinstance(shown, dict)
        or not set(shown) <= set(SHOWN_FIELDS)
        or not all(v is None or isinstance(v, str) for v in shown.values())
    ):
        raise ValueError(f"the words a rule binds are null or an object of {', '.join(SHOWN_FIELDS)}")
    return shown


def check_max_risk(max_risk: str | None, high_risk: bool) -> str | None:
    if max_risk is not None and max_risk not in RISKS:
        raise ValueError(f"a rule's highest risk is one of {', '.join(RISKS)}")
    if max_risk == "high" and not high_risk:
        raise ValueError("a rule up to high risk must say it approves high-risk calls")
    return max_risk


def matches(
    rule: RuleRow,
    owner: str,
    tool: str,
    arguments: Any,
    risk: str | None,
    said: Mapping[str, str | None] | None = None,
) -> bool:
    """Whether the rule answers this approval (the rule's own life, ``live``, is checked apart);
    ``said``: the approval's ``words`` (none: no details and no context)."""
    if rule.agent not in (ANY_AGENT, owner):
        return False
    if risk == "high" and not rule.high_risk:
        return False
    if rule.max_risk is not None and risk_rank(risk) > risk_rank(rule.max_risk):
        return False
    if rule.shown is not None and any((said or {}).get(k) != v for k, v in rule.shown.items()):
        return False
    return fnmatch.fnmatchcase(tool, rule.tool) and arguments_fit(rule.arguments, arguments)


def exactly(request: Request) -> dict[str, Any]:
    """The default rule for a request: this agent, this tool, these exact arguments, the words the
    person saw around them (``shown``) and a risk up to the one shown."""
    tool, arguments = subject(request.text, request.title, request.payload)
    shown: dict[str, str | None] = {"details": request.details, "context": request.context}
    if tool != request.text:  # the subject is a title or a gated call's tool: the action line is bound too
        shown = {"text": request.text, **shown}
    return {
        "agent": request.owner,
        "tool": glob.escape(tool),
        "arguments": {"exact": arguments},
        "shown": shown,
        "max_risk": request.risk or RISKS[0],
        "high_risk": request.risk == "high",
    }


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


def binds_words(rule: RuleRow) -> str:
    """What a rule binds besides its tool and arguments, in a few words: details and risk."""
    if rule.shown is None:
        said = "any details"
    else:
        parts = []
        for name in SHOWN_FIELDS:
            if name in rule.shown:
                value = rule.shown[name]
                parts.append(f"no {name}" if value is None else f"{name} {json.dumps(_short(value))}")
        said = ", ".join(parts) if parts else "any details"
    if rule.max_risk is not None:
        risk = f"risk up to {rule.max_risk}"
    else:
        risk = "any risk" if rule.high_risk else "any risk but high"
    return f"{said}; {risk}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rule_of(responder: str | None, channel: str | None) -> int | None:
    """The id of the rule that answered, from a request's responder (``rule 7`` via ``rule``)."""
    if channel != RULE_CHANNEL or not responder or not responder.startswith("rule "):
        return None
    number = responder.removeprefix("rule ")
    return int(number) if number.isdigit() else None


def rule_json(rule: RuleRow, at: float) -> dict[str, Any]:
    from hitl_mcp.core.models import iso

    return {
        "id": rule.id,
        "agent": rule.agent,
        "tool": rule.tool,
        "arguments": rule.arguments,
        "high_risk": rule.high_risk,
        "shown": rule.shown,
        "max_risk": rule.max_risk,
        "binds": binds_words(rule),
        "created_by": rule.created_by,
        "created_at": iso(rule.created_at),
        "expires_at": iso(rule.expires_at),
        "uses_left": rule.uses_left,
        "fired": rule.fired,
        "revoked_at": iso(rule.revoked_at),
        "revoked_by": rule.revoked_by,
        "live": rule.live(at),
    }
