"""The inbox's remembered answers and kill switch: ``/rules`` lists the rules (who added each, when,
expiry and uses left, how many times it fired) with a one-click revoke, and the pause and resume
buttons; ``/requests/{id}/remember`` is "Approve & remember…": a rule from a small form, then the
approval. Every change is a POST with the session's CSRF token (``deps.read_post``), as in ``pages.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.broker import Broker
from hitl_mcp.core.errors import BrokerError
from hitl_mcp.core.models import Kind, Request, now
from hitl_mcp.core.rules import (
    DEFAULT_HOURS,
    MAX_USES,
    RISKS,
    binds_words,
    exactly,
    load_pattern,
    pattern_words,
    risk_rank,
    rule_id,
    rule_json,
    shown_id,
    unescape,
    whole,
)
from hitl_mcp.web.deps import page_context, read_post, requires, web
from hitl_mcp.web.errors import Problem
from hitl_mcp.web.pagekit import render, wants_json
from hitl_mcp.web.people import actor, inbox_reply

NO_APPROVAL = "There is no pending approval with that id."


@requires()
async def rules_page(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    at = now()
    rules = await broker.rules()
    paused = await broker.paused()
    if wants_json(http):
        return JSONResponse({"rules": [rule_json(r, at) for r in rules], "paused": _pause_json(paused)})
    return render(
        "rules.html",
        rules=rules,
        at=at,
        paused=paused,
        pattern_words=pattern_words,
        binds_words=binds_words,
        unescape=unescape,
        **await page_context(http, "rules"),
    )


def _pause_json(pause: Any) -> dict[str, Any] | None:
    return None if pause is None else {"by": pause.by, "reason": pause.reason, "at": pause.at}


def _sentence(exc: Exception) -> str:
    text = str(exc)
    return text[:1].upper() + text[1:] + "."


def _done(http: HttpRequest, message: str, **data: Any) -> Response:
    if wants_json(http):
        return JSONResponse({"ok": True, "message": message, **data})
    return RedirectResponse("/rules", status_code=303)


@requires()
async def revoke(http: HttpRequest) -> Response:
    await read_post(http, "Not revoked")
    broker = await web(http).broker()
    written = http.path_params["id"]
    number = rule_id(written)
    if number is None:  # not an id any rule can have (letters, a sign, 20 digits): no such rule
        shown = shown_id(written)
        message = f"No rule with id {shown}" + ("" if shown.endswith("…") else ".")
        raise Problem(404, message, title="Not revoked")
    try:
        rule = await broker.revoke_rule(number, await actor(http))
    except BrokerError as exc:
        raise Problem(404, _sentence(exc), title="Not revoked") from None
    return _done(http, f"Rule {rule.id} revoked.", rule=rule_json(rule, now()))


@requires()
async def pause(http: HttpRequest) -> Response:
    form = await read_post(http, "Not paused")
    broker = await web(http).broker()
    try:
        paused = await broker.pause(await actor(http), form.get("reason", "")[:500])
    except BrokerError as exc:
        raise Problem(409, _sentence(exc), title="Not paused") from None
    return _done(http, f"Approvals {paused.words}.", paused=_pause_json(paused))


@requires()
async def resume(http: HttpRequest) -> Response:
    await read_post(http, "Not resumed")
    broker = await web(http).broker()
    try:
        seconds, moved = await broker.resume(await actor(http))
    except BrokerError as exc:
        raise Problem(409, _sentence(exc), title="Not resumed") from None
    return _done(http, "Approvals resumed.", paused_seconds=round(seconds, 3), requests_pushed=moved)


async def _approval(broker: Broker, request_id: str) -> Request:
    request = await broker.get(request_id)
    if request is None or request.kind != Kind.APPROVAL or not request.is_open:
        raise Problem(404, NO_APPROVAL)
    return request


def _draft(request: Request) -> dict[str, str]:
    rule = exactly(request)
    return {
        "agent": rule["agent"],
        "tool": rule["tool"],
        "arguments": json.dumps(rule["arguments"], indent=1, ensure_ascii=False),
        "hours": f"{DEFAULT_HOURS:g}",
        "uses": "",
        "max_risk": rule["max_risk"],
    }


def _page(request: Request, draft: Mapping[str, str], error: str | None) -> dict[str, Any]:
    """What ``remember.html`` shows: the form, and the risks a rule from it may go up to."""
    return {
        "request": request,
        "draft": draft,
        "error": error,
        "risks": RISKS[risk_rank(request.risk) :],
    }


@requires()
async def remember_form(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    request = await _approval(broker, http.path_params["id"])
    return render(
        "remember.html", **_page(request, _draft(request), None), **await page_context(http, "remember")
    )


@requires()
async def remember(http: HttpRequest) -> Response:
    """Add the rule the form describes, then approve this request (the rule covers the next ones)."""
    request_id = http.path_params["id"]
    form = await read_post(http, "Not remembered", request_id)
    deps = web(http)
    broker = await deps.broker()
    request = await _approval(broker, request_id)
    try:
        fields = _rule_fields(form, request)
        rule = await broker.add_rule(**fields, created_by=await actor(http), request_id=request.id)
    except (ValueError, BrokerError) as exc:
        message = str(exc)[:1].upper() + str(exc)[1:]
        if wants_json(http):
            raise Problem(422, message, title="Not remembered") from None
        page = _page(request, {**_draft(request), **form}, message)
        raise Problem(422, message, template="remember.html", context=page, page="remember") from None
    reply = await inbox_reply(
        http, broker, request.id, decision="approve", comment=form.get("comment") or None
    )
    verdict = await broker.resolve(request.id, reply)
    if wants_json(http):
        return JSONResponse({"ok": True, "rule": rule_json(rule, now()), "approved": verdict.won})
    return RedirectResponse(f"/rules?added={rule.id}", status_code=303)


def _rule_fields(form: Mapping[str, str], request: Request) -> dict[str, Any]:
    """The rule the form asks for; ``ValueError`` saying what is wrong. What the form leaves out is
    bound as the person saw it: the details and context (unless "any details" is ticked), a risk up
    to the one shown (unless a higher one is chosen)."""
    arguments = load_pattern(form.get("arguments") or "null")
    hours = uses = None
    if (form.get("hours") or "").strip():
        written = form["hours"].strip()
        if not written.isascii():
            raise ValueError("the expiry is a number of hours, in the digits 0-9")
        try:
            hours = float(written)
        except ValueError:
            raise ValueError("the expiry is a number of hours") from None
    if (form.get("uses") or "").strip():
        uses = whole(form["uses"], "the number of uses", MAX_USES)
    default = exactly(request)
    max_risk = form.get("max_risk") or default["max_risk"]
    if max_risk not in RISKS:
        raise ValueError(f"the highest risk is one of {', '.join(RISKS)}")
    if form.get("high_risk") == "yes":  # the form before it had a choice of risk: a box for high
        max_risk = "high"
    if risk_rank(max_risk) < risk_rank(request.risk):
        raise ValueError(f"the highest risk cannot be below this approval's own ({request.risk})")
    high_risk = max_risk == "high"
    if high_risk and form.get("confirm_high_risk") != "yes":
        raise ValueError("a rule that approves high-risk calls needs its confirmation box ticked too")
    return {
        "agent": form.get("agent", ""),
        "tool": form.get("tool", ""),
        "arguments": arguments,
        "hours": hours,
        "uses": uses,
        "high_risk": high_risk,
        "max_risk": max_risk,
        "shown": None if form.get("any_details") == "yes" else default["shown"],
    }


routes: list[BaseRoute] = [
    Route("/rules", rules_page, methods=["GET"]),
    Route("/rules/{id}/revoke", revoke, methods=["POST"]),
    Route("/pause", pause, methods=["POST"]),
    Route("/resume", resume, methods=["POST"]),
    Route("/requests/{id}/remember", remember_form, methods=["GET"]),
    Route("/requests/{id}/remember", remember, methods=["POST"]),
]
