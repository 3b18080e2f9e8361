"""Bad input to the rules' routes and CLI verbs gets a clear 4xx or one CLI line (issue 28, item 5).

Before: ``POST /rules/<huge id>/revoke`` was a 500 and ``hitl-mcp rules revoke <huge id>`` a traceback
(``OverflowError: Python int too large to convert to SQLite INTEGER``); a 5,000-deep JSON pattern on
the remember form a 500; ``uses=²`` answered in Python's words; an agent ``\\x00`` or a lone-surrogate
tool name was accepted. The inbox is driven in process as a browser; the CLI runs as a subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.core.models import Status
from hitl_mcp.core.rules import MAX_PATTERN_CHARS, MAX_PATTERN_DEPTH
from tests.broker.test_rules import approval
from tests.conftest import cli as hitl
from tests.conftest import running
from tests.mcp.test_elicitation import browser, csrf_of

pytestmark = pytest.mark.anyio

HUGE = "9" * 30
DEEP = '{"exact": ' + "[" * 5000 + "]" * 5000 + "}"
TOO_DEEP = f"the argument pattern is nested more than {MAX_PATTERN_DEPTH} levels deep"
USES = "the number of uses is a whole number from 1 to 1,000,000, in the digits 0-9"


async def test_the_inbox_refuses_bad_rule_input_with_a_clear_4xx(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        request, _ = await broker.ask(approval(channels=["web"]))
        async with browser(rt) as person:
            page = (await person.get(f"/requests/{request.id}/remember")).text
            csrf = csrf_of(page)
            as_json = {"Accept": "application/json"}

            # an id no rule can have is "no such rule", as an id none has
            for written in (HUGE, "9" * 5000, "-1", "0", "abc"):
                r = await person.post(f"/rules/{written}/revoke", data={"csrf": csrf}, headers=as_json)
                assert (r.status_code, r.json()["error"][:15]) == (404, "No rule with id"), written
            r = await person.post(f"/rules/{HUGE}/revoke", data={"csrf": csrf})
            assert r.status_code == 404 and f"No rule with id {HUGE[:20]}…<" in r.text

            form = {"csrf": csrf, "agent": "bot", "tool": "Deploy v3", "arguments": "null", "hours": "1"}
            refused = {
                "deep": ({"arguments": DEEP}, TOO_DEEP),
                "deep, but not too deep for Python": (
                    {"arguments": "[" * (MAX_PATTERN_DEPTH + 1) + "]" * (MAX_PATTERN_DEPTH + 1)},
                    TOO_DEEP,
                ),
                "superscript": ({"uses": "²"}, USES),
                "arabic-indic": ({"uses": "٣"}, USES),
                "zero": ({"uses": "0"}, USES),
                "too many": ({"uses": "1" + "0" * 30}, USES),
                "NUL agent": ({"agent": "\x00"}, "the agent has a control character (U+0000)"),
                "escape in the tool": ({"tool": "Deploy\x1b[2J"}, "the tool pattern has a control character"),
                "fullwidth hours": ({"hours": "１"}, "the expiry is a number of hours, in the digits 0-9"),
            }
            for name, (change, message) in refused.items():
                r = await person.post(
                    f"/requests/{request.id}/remember", data={**form, **change}, headers=as_json
                )
                assert r.status_code == 422, name
                assert r.json()["error"].startswith(message[:1].upper() + message[1:]), (name, r.json())
            r = await person.post(f"/requests/{request.id}/remember", data={**form, "arguments": DEEP})
            assert r.status_code == 422 and TOO_DEEP[1:] in r.text  # the form again, saying why
        assert await broker.rules() == []
        assert (await broker.get_or_raise(request.id)).status == Status.PENDING  # nothing approved


async def test_the_cli_refuses_bad_rule_input_on_one_line(state_dir: Path) -> None:
    absent = await hitl(state_dir, "rules", "revoke", "7")
    assert absent == (1, "", "hitl-mcp: no rule with id 7\n")  # what any "not found" says
    assert await hitl(state_dir, "rules", "revoke", HUGE) == (
        1,
        "",
        f"hitl-mcp: no rule with id {HUGE[:20]}…\n",
    )
    assert await hitl(state_dir, "rules", "revoke", "²") == (1, "", "hitl-mcp: no rule with id ²\n")

    add = ("rules", "add", "--agent", "bot", "--tool", "Deploy v3")
    refused = {
        ("--uses", "²"): "--uses is a whole number from 1 to 1,000,000, in the digits 0-9",
        ("--uses", "1" + "0" * 30): "--uses is a whole number from 1 to 1,000,000, in the digits 0-9",
        ("--arguments", DEEP): f"--arguments: {TOO_DEEP}",
        ("--arguments", '{"exact": "' + "x" * MAX_PATTERN_CHARS + '"}'): (
            f"--arguments: the argument pattern is longer than {MAX_PATTERN_CHARS:,} characters of JSON"
        ),
        ("--agent", "bot\x01"): "the agent has a control character (U+0001); it must be printable",
        # a byte that is not UTF-8 in argv reaches Python as a lone surrogate
        ("--tool", "Deploy \udcff"): "the tool pattern is not valid text (a lone surrogate, U+DCFF)",
        ("--hours", "nan"): "a rule's expiry is between a moment and a year, in hours",
    }
    for extra, line in refused.items():
        code, out, err = await hitl(state_dir, *add, *extra)
        assert (code, out, err) == (1, "", f"hitl-mcp: {line}\n"), extra[0]
    code, out, _ = await hitl(state_dir, "rules", "list", "--json")
    assert (code, out.strip()) == (0, "[]")
