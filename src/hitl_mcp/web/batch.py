"""Batch approve: "Approve all N from <agent>" in the inbox, for plain approvals only, with one
confirmation page.

Plain: a pending approval that is not ``risk: high`` and needs no quorum (approvals carry no form and
no choices). A quorum vote is one person's considered vote on that request, never one of a batch. The
confirmation lists what will be approved and what is left pending for the person's own review (high
risk, and quorum votes), each with why.
The POST approves exactly the ids the page listed that are still plain and pending, each through the
broker as the person's own approval (each audited as usual), then appends one ``batch_approved`` row
listing them.
"""

from __future__ import annotations

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.broker import Broker
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.web.deps import page_context, read_post, requires, web
from hitl_mcp.web.errors import Problem
from hitl_mcp.web.pagekit import render, wants_json
from hitl_mcp.web.people import actor, inbox_reply, may_answer

#: at most this many in one batch (the rest stay for the next one)
BATCH_LIMIT = 200


def plain(request: Request) -> bool:
    """Whether a batch may approve it: a pending approval that is not high risk, needs no quorum and
    has no preview (a preview is approved on its own page, below the whole preview)."""
    return (
        request.kind == Kind.APPROVAL
        and request.status == Status.PENDING
        and request.risk != "high"
        and request.approvals is None
        and request.preview is None
    )


def why_left(request: Request) -> str:
    """Why a batch leaves an approval for the person's own review."""
    if request.preview is not None and request.risk != "high" and request.approvals is None:
        return "has a preview: approve it on its own page, below the whole preview"
    if request.approvals is not None:
        quorum = request.approvals
        return f"needs {quorum.required} of {len(quorum.of)} approvals: each vote is cast on its own"
    return "high risk"


async def from_agent(broker: Broker, owner: str) -> list[Request]:
    """The pending approvals of one agent (its owner identity), oldest first."""
    pending = await broker.list_requests(Status.PENDING, 1000)
    return sorted(
        (r for r in pending if r.owner == owner and r.kind == Kind.APPROVAL), key=lambda r: r.created_at
    )


@requires()
async def confirm(http: HttpRequest) -> Response:
    owner = http.query_params.get("agent", "")
    broker = await web(http).broker()
    approvals = await from_agent(broker, owner)
    chosen = [r for r in approvals if plain(r)][:BATCH_LIMIT]
    if not approvals:
        raise Problem(404, "That agent has no pending approvals.")
    return render(
        "batch.html",
        owner=owner,
        agent=approvals[0].client_name or owner,
        chosen=chosen,
        left=[r for r in approvals if r not in chosen],
        why_left=why_left,
        **await page_context(http, "batch"),
    )


@requires()
async def approve_all(http: HttpRequest) -> Response:
    form = await read_post(http, "Not approved")
    if form.get("confirm") != "yes":
        raise Problem(422, "Approving a batch needs its confirmation.", title="Not approved")
    owner = form.get("agent", "")
    wanted = {i for i in form.get("ids", "").split(",") if i}
    deps = web(http)
    broker = await deps.broker()
    approved: list[str] = []
    for request in await from_agent(broker, owner):
        if request.id not in wanted or not plain(request):
            continue  # asked after the page was shown, or no longer plain: left for the person
        if await may_answer(http, broker, request) is not None:
            continue  # asked of someone else: theirs to answer
        reply = await inbox_reply(http, broker, request.id, decision="approve")
        if (await broker.resolve(request.id, reply)).won:
            approved.append(request.id)
    if approved:
        await broker.record(
            None,
            "batch_approved",
            await actor(http),
            {"agent": owner, "ids": approved, "channel": deps.web_channel},
        )
    if wants_json(http):
        return JSONResponse({"ok": True, "approved": approved})
    return RedirectResponse("/", status_code=303)


routes: list[BaseRoute] = [
    Route("/batch", confirm, methods=["GET"]),
    Route("/batch", approve_all, methods=["POST"]),
]
