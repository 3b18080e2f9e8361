"""The inbox as server-rendered pages: pending requests, one request, history, notifications.

GET routes only read. Every change is a POST with the CSRF token (a ``csrf`` form field or the
``X-CSRF-Token`` header) on top of the session cookie, or the bearer token. The forms work without
JavaScript (a POST, then a redirect); ``static/app.js`` submits them in place and asks for JSON, and
gets the JSON API's answer (``replies.py``). Sign-in is in ``signin.py``, the app shell in ``pwa.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.broker import Broker
from hitl_mcp.broker.views import times_asked
from hitl_mcp.core import delegation
from hitl_mcp.core.models import Kind, Request, Status, as_decision
from hitl_mcp.web import REPLY_FIELDS
from hitl_mcp.web.deps import page_context, read_post, requires, web
from hitl_mcp.web.errors import Problem
from hitl_mcp.web.pagekit import render, wants_json
from hitl_mcp.web.people import actor, asked_of, inbox_reply, who
from hitl_mcp.web.replies import ReplyInvalid, answered, resolve, too_late
from hitl_mcp.web.views import (
    HISTORY_KINDS,
    HISTORY_STATUSES,
    HistoryFilter,
    agent_groups,
    agent_name,
    already_line,
)

#: pending requests on one page of the inbox; the rest are a link away ("n more")
PENDING_PAGE = 200
NOTIFICATION_SCAN = 100
NOTIFICATION_LIMIT = 30
HISTORY_SCAN = 2000
HISTORY_LIMIT = 200
DISMISSED = "dismissed"
NO_REQUEST = "There is no request with that id."


async def notification_feed(broker: Broker) -> list[Request]:
    """The newest notifications nobody has dismissed (a dismissal is an audit row, not a column)."""
    feed: list[Request] = []
    for note in await broker.list_requests(Status.NOTIFIED, NOTIFICATION_SCAN):
        if await _dismissed(broker, note.id):
            continue
        feed.append(note)
        if len(feed) >= NOTIFICATION_LIMIT:
            break
    return feed


async def _dismissed(broker: Broker, request_id: str) -> bool:
    return any(row.event == DISMISSED for row in await broker.audit(request_id))


@requires()
async def inbox(http: HttpRequest) -> Response:
    return render("inbox.html", **await _inbox_context(http), **await page_context(http, "inbox"))


async def _inbox_context(http: HttpRequest, away: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The inbox page's own context (``page_context`` adds the layout's); ``away``: the Away form as
    sent, when it comes back with an error."""
    broker = await web(http).broker()
    before = http.query_params.get("before") or None
    if before is not None and (len(before) > 64 or await broker.get(before) is None):
        raise Problem(404, "There is no such page of the inbox: its link names no request.")
    # newest first, a page at a time; "before" is the last request of the page before
    pending = await broker.list_requests(Status.PENDING, PENDING_PAGE + 1, before)
    more = len(pending) > PENDING_PAGE
    pending = pending[:PENDING_PAGE]
    answered_id = http.query_params.get("answered")
    # a person signed in sees first what was asked of them (to, a quorum, as a delegate)
    found = await who(http)
    mine: list[Request] = []
    if found is not None and found.person is not None:
        policy = await broker.policy_now()
        mine = [r for r in pending if asked_of(r, found.person, policy)]
    return {
        "mine": mine,
        "groups": agent_groups([r for r in pending if r not in mine]),
        "asked": await broker.times_asked([r.id for r in pending]),  # "asked 3 times": one card
        "next_page": pending[-1].id if more else None,
        "more": await broker.count_requests(Status.PENDING, pending[-1].id) if more else 0,
        "paged": before is not None,
        "notifications": await notification_feed(broker),
        "delegations": await broker.delegations_now(),
        "people": broker.people(),
        "away": away or {},
        "answered": await broker.get(answered_id[:64]) if answered_id else None,
    }


async def request_context(
    broker: Broker, request: Request, error: str | None = None, draft: Mapping[str, str] | None = None
) -> dict[str, Any]:
    audit = await broker.audit(request.id)
    return {
        "request": request,
        "deliveries": await broker.deliveries(request.id),
        "replies": await broker.replies(request.id),
        "audit": audit,
        "asked": times_asked(audit),
        "error": error,
        "draft": draft or {},
    }


@requires()
async def show(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    request = await broker.get(http.path_params["id"])
    if request is None:
        raise Problem(404, NO_REQUEST)
    return render(
        "request.html", **await request_context(broker, request), **await page_context(http, "request")
    )


@requires()
async def answer(http: HttpRequest) -> Response:
    request_id = http.path_params["id"]
    form = await read_post(http, "Not sent", request_id)
    fields: dict[str, str | None] = {}
    for name, limit in REPLY_FIELDS.items():
        value = form.get(name, "")
        if len(value) > limit:
            raise Problem(
                422, f"The {name} is longer than {limit} characters.", title="Not sent", request_id=request_id
            )
        fields[name] = value if value.strip() else None
    decision = as_decision(fields["decision"])
    if fields["decision"] is not None and decision is None:
        raise Problem(422, "The decision must be approve or deny.", title="Not sent", request_id=request_id)
    deps = web(http)
    broker = await deps.broker()
    if decision == "approve" and form.get("confirm") != "yes":
        await _confirm_high_risk(broker, request_id, form)
    # the button pressed says what the answer is: a decision, else a choice, else the text
    choice = fields["choice"] if decision is None else None
    text = fields["text"] if decision is None and choice is None else None
    reply = await inbox_reply(
        http, broker, request_id, comment=fields["comment"], decision=decision, choice=choice, text=text
    )
    try:
        verdict = await resolve(broker, request_id, reply, not_found=NO_REQUEST)
    except ReplyInvalid as exc:
        message = str(exc)[:1].upper() + str(exc)[1:]
        request = await broker.get_or_raise(request_id)
        page = await request_context(broker, request, message, form)
        raise Problem(422, message, template="request.html", context=page, page="request") from None
    settled = verdict.request
    if not verdict.won and not verdict.counted:
        line = already_line(settled)
        raise too_late(settled, line, template="already.html", context={"request": settled, "line": line})
    if wants_json(http):
        return answered(settled)
    target = "/?answered=" + settled.id if form.get("next") == "inbox" else f"/requests/{settled.id}"
    return RedirectResponse(target, status_code=303)


async def _confirm_high_risk(broker: Broker, request_id: str, form: Mapping[str, str]) -> None:
    """A high-risk approval is given in two steps, with or without JavaScript: the first asks."""
    request = await broker.get(request_id)
    if request is None or not request.is_open or request.risk != "high":
        return
    context = {
        "request": request,
        "comment": form.get("comment", ""),
        "back": f"/requests/{request.id}" if form.get("next") == "request" else "/",
        "next": form.get("next", ""),
    }
    raise Problem(
        428,
        "Approving a high-risk request needs a confirmation.",
        extra={"confirm": True},
        template="confirm.html",
        context=context,
        page="confirm",
        html_status=200,
    )


@requires()
async def dismiss(http: HttpRequest) -> Response:
    await read_post(
        http, "Not dismissed", stale="This form did not come from your inbox. Reload and try again."
    )
    deps = web(http)
    broker = await deps.broker()
    request_id = http.path_params.get("id")
    if request_id is None:
        targets = [n.id for n in await notification_feed(broker)]
    else:
        note = await broker.get(request_id)
        if note is None or note.kind != Kind.NOTIFICATION:
            raise Problem(404, "There is no notification with that id.")
        targets = [] if await _dismissed(broker, note.id) else [note.id]
    for target in targets:
        await broker.record(target, DISMISSED, await actor(http), {"channel": deps.web_channel})
    if wants_json(http):
        return JSONResponse({"ok": True, "dismissed": targets})
    return RedirectResponse("/", status_code=303)


@requires()
async def end_delegation(http: HttpRequest) -> Response:
    """End a run-time delegation (``hitl-mcp delegate --end`` from the inbox); audited."""
    await read_post(http, "Not ended", stale="This form did not come from your inbox. Reload and try again.")
    broker = await web(http).broker()
    try:
        ended = await broker.end_delegation(http.path_params["person"][:32], await actor(http))
    except ValueError as exc:  # other changes kept landing first
        said = str(exc)
        raise Problem(409, said[:1].upper() + said[1:] + ".", title="Not ended") from None
    if not ended:
        raise Problem(404, "There is no run-time delegation from that person.")
    return RedirectResponse("/", status_code=303)


@requires()
async def set_delegation(http: HttpRequest) -> Response:
    """Set a run-time delegation from the inbox's Away form (``hitl-mcp delegate`` from the inbox);
    checked as the CLI checks it, audited ``delegation_set``. A refusal comes back on the inbox."""
    form = await read_post(
        http, "Not set", stale="This form did not come from your inbox. Reload and try again."
    )
    broker = await web(http).broker()
    fields = {name: form.get(name, "").strip()[:64] for name in ("from", "to", "until", "from_time")}
    try:
        if not fields["until"]:
            raise ValueError("say until when the delegation lasts")
        new = await broker.set_delegation(
            fields["from"], fields["to"], fields["until"], fields["from_time"] or None, await actor(http)
        )
    except ValueError as exc:  # a refusal names people first: "Refused: owner cannot …", never "Owner"
        said = f"refused: {exc}" if isinstance(exc, delegation.Refused) else str(exc)
        message = said[:1].upper() + said[1:] + "."
        if wants_json(http):
            raise Problem(422, message, title="Not set") from None
        page = await _inbox_context(http, {**fields, "error": message})
        raise Problem(
            422, message, title="Not set", template="inbox.html", context=page, page="inbox"
        ) from None
    if wants_json(http):
        return JSONResponse({"ok": True, "delegation": new.model_dump(mode="json", by_alias=True)})
    return RedirectResponse("/", status_code=303)


@requires()
async def history(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    wanted = HistoryFilter.from_query(http.query_params)
    scanned = await broker.list_requests(None, HISTORY_SCAN)
    settled = [r for r in scanned if r.status in HISTORY_STATUSES and r.kind in HISTORY_KINDS]
    rows = sorted(
        (r for r in settled if wanted.matches(r)),
        key=lambda r: r.closed_at or r.created_at,
        reverse=True,
    )
    return render(
        "history.html",
        rows=rows[:HISTORY_LIMIT],
        total=len(rows),
        limit=HISTORY_LIMIT,
        filters=wanted,
        agents=sorted({agent_name(r) for r in settled} | ({wanted.agent} if wanted.agent else set())),
        kinds=[k.value for k in HISTORY_KINDS],
        statuses=[s.value for s in HISTORY_STATUSES],
        **await page_context(http, "history"),
    )


routes: list[BaseRoute] = [
    Route("/", inbox, methods=["GET"]),
    Route("/requests/{id}", show, methods=["GET"]),
    Route("/requests/{id}/answer", answer, methods=["POST"]),
    Route("/history", history, methods=["GET"]),
    Route("/notifications/dismiss", dismiss, methods=["POST"]),
    Route("/notifications/{id}/dismiss", dismiss, methods=["POST"]),
    Route("/delegations", set_delegation, methods=["POST"]),
    Route("/delegations/{person}/end", end_delegation, methods=["POST"]),
]
