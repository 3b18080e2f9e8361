"""People in the inbox: who is signed in, and as whom; signing in with a passkey; enrolling one.

- ``who(http)``: the one function to ask. ``Who.operator`` for the web token (the Bearer header, or
  a session started with the login link or the pasted token), ``Who.person`` for a person of
  ``people:`` signed in with their passkey; None for anyone else.
- ``GET /enrol/{person}/{token}``: the page an enrolment link (``hitl-mcp people invite NAME``)
  opens; ``POST .../options`` starts the ceremony, ``POST /enrol/{person}/{token}`` finishes it:
  the link is spent (one use, before it expires, only for the person it names), the passkey kept,
  and the browser signed in as the person.
- ``POST /login/passkey/options`` and ``POST /login/passkey``: sign in with a passkey.

Who may answer what in the inbox (``may_answer``): a person answers what was asked of them (``to``,
a quorum's ``of``), what they stand in for as a delegate, and what was asked of no one in particular;
the operator what the web channel's ``operator_answers`` allows (``all``, ``unaddressed``: only what
was asked of no one in particular, ``none``). The operator never fills a person's seat in a quorum.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import HTTPConnection
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.broker import Broker
from hitl_mcp.core.delegation import stands_for
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Reply, Request, now
from hitl_mcp.core.principal import OPERATOR, token_digest
from hitl_mcp.web.deps import web
from hitl_mcp.web.errors import Problem
from hitl_mcp.web.pagekit import render
from hitl_mcp.web.passkeys import (
    INVITE,
    PASSKEY,
    SPENT,
    Ceremonies,
    Party,
    Passkey,
    PasskeyError,
    authentication_options,
    credential_digest,
    credential_id_of,
    registration_options,
    verify_assertion,
    verify_registration,
)
from hitl_mcp.web.sessions import Access

log = logging.getLogger("hitl_mcp.web")

OperatorAnswers = Literal["all", "unaddressed", "none"]
#: the largest ceremony body accepted
MAX_CEREMONY_BODY = 32 * 1024


@dataclass(frozen=True)
class Who:
    """Who is signed in: the operator (the web token), or a person of ``people:`` (a passkey)."""

    person: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.person is None

    @property
    def label(self) -> str:
        """How replies and pages name them: the person's name, or "operator"."""
        return self.person or OPERATOR


async def who(conn: HTTPConnection) -> Who | None:
    """Who is signed in on this request, and as whom (None: nobody). The sign-in check of
    ``deps.requires`` has usually run already; else it runs now."""
    found: Access | None = getattr(conn.state, "access", None)
    if found is None:
        found = await web(conn).sessions.read(conn)  # type: ignore[arg-type]
    if found is None:
        return None
    return Who(found.person)


async def actor(conn: HTTPConnection) -> str:
    """How the audit log names whoever is signed in: the person, or "operator"."""
    found = await who(conn)
    return found.label if found is not None else OPERATOR


def asked_of(request: Request, person: str, policy: Policy) -> bool:
    """Whether ``request`` was asked of ``person``: named in ``to``, a quorum's ``of`` or a later step
    of its ladder (``Policy.asked_of``), or standing in for someone who was."""
    asked = policy.asked_of(request)
    return person in asked or stands_for(person, asked, dict(policy.delegates)) is not None


def addressed(request: Request) -> bool:
    return bool(request.to or request.approvals)


async def may_answer(http: HttpRequest, broker: Broker, request: Request) -> str | None:
    """Why the one signed in may not answer ``request`` here, or None when they may."""
    found = await who(http)
    if found is None:
        return "Sign in first."
    if found.person is None:
        allowed = web(http).operator_answers
        if allowed == "none" or (allowed == "unaddressed" and addressed(request)):
            return "The operator may not answer this request here: it was asked of people, who sign in."
        return None
    if not addressed(request):
        return None
    policy = await broker.policy_now()
    if asked_of(request, found.person, policy):
        return None
    return f"This request was not asked of {found.person}."


async def inbox_reply(
    http: HttpRequest, broker: Broker, request_id: str, *, api: bool = False, **fields: Any
) -> Reply:
    """The reply of whoever is signed in, after checking they may give it (else a 403 ``Problem``);
    an unknown id is left to the broker (404)."""
    found = await who(http)
    request = await broker.get(request_id)
    if request is not None and request.is_open:
        why = await may_answer(http, broker, request)
        if why is not None:
            raise Problem(403, why, title="Not sent", request_id=request_id, api=api)
    label = found.label if found is not None else OPERATOR
    identity = found.person if found is not None else None
    return Reply(channel=web(http).web_channel, responder=label, identity=identity, **fields)


# --------------------------------------------------------------------------- the ceremonies


def _party(http: HttpRequest) -> Party:
    return Party.of(http, web(http).sessions.public_url)


def _ceremonies(http: HttpRequest) -> Ceremonies:
    return Ceremonies(web(http).sessions.auth.signer("webauthn"))


async def _body(http: HttpRequest) -> dict[str, Any]:
    if http.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise Problem(415, "Send JSON.", api=True)
    body = await http.body()
    if len(body) > MAX_CEREMONY_BODY:
        raise Problem(413, "Too large.", api=True)
    try:
        data = json.loads(body or b"{}")
    except (ValueError, RecursionError):
        raise Problem(400, "The body is not JSON.", api=True) from None
    if not isinstance(data, dict):
        raise Problem(400, "The body must be a JSON object.", api=True)
    return data


async def _invite(http: HttpRequest) -> tuple[Broker, str]:
    """The broker and the person a live enrolment link names, else a Problem saying why not."""
    person, token = http.path_params["person"], http.path_params["token"]
    broker = await web(http).broker()
    row = await broker.store.credential(INVITE, token_digest(token)) if len(token) < 200 else None
    if row is None or row.name != person:
        used = [r for r in await broker.store.credentials(INVITE) if r.digest == token_digest(token)]
        if used and used[0].name == person:
            raise Problem(409, "This enrolment link was already used; ask for a new one.", title="Link used")
        raise Problem(404, "This enrolment link is not valid.", title="Link not valid")
    if float(row.data.get("expires_at", 0)) < now():
        raise Problem(410, "This enrolment link has expired; ask for a new one.", title="Link expired")
    if person not in broker.policy.people:
        raise Problem(404, f"{person} is not among the people this server knows.", title="Link not valid")
    return broker, person


async def _passkeys(broker: Broker, person: str | None = None) -> list[Passkey]:
    rows = await broker.store.credentials(PASSKEY)
    keys = [Passkey.of(r.name, r.data, r.created_at) for r in rows if r.revoked_at is None]
    return [k for k in keys if person is None or k.person == person]


async def enrol_page(http: HttpRequest) -> Response:
    try:
        _, person = await _invite(http)
    except Problem as problem:
        return render(
            "message.html",
            problem.status_code,
            title=problem.title,
            message=problem.message,
            signed_in=False,
            now=now(),
            page="message",
        )
    return render("enrol.html", 200, person=person, signed_in=False, now=now(), page="enrol", pending_count=0)


async def enrol_options(http: HttpRequest) -> Response:
    broker, person = await _api(_invite(http))
    challenge, state = _ceremonies(http).start("enrol", person)
    exclude = [k.credential_id for k in await _passkeys(broker, person)]
    options = registration_options(_party(http), person, challenge, exclude)
    return JSONResponse({"options": json.loads(options), "state": state})


async def enrol(http: HttpRequest) -> Response:
    broker, person = await _api(_invite(http))
    data = await _body(http)
    try:
        challenge, whom, nonce = _ceremonies(http).read(data.get("state"), "enrol")
        if whom != person:
            raise PasskeyError("This page is out of date: reload it and try again.")
        credential_id, public_key, count = verify_registration(
            _party(http), challenge, data.get("credential")
        )
    except PasskeyError as exc:
        raise Problem(400, str(exc), api=True) from None
    if not await broker.first_seen(SPENT, nonce):
        raise Problem(409, "This page was already used: reload it and try again.", api=True)
    # spent before the passkey is kept: of two browsers racing on one link, one gets it
    if await broker.store.revoke_credential(INVITE, person, f"{person} (enrolment)") is None:
        raise Problem(409, "This enrolment link was already used; ask for a new one.", api=True)
    label = str(data.get("label") or "")[:60] or "passkey"
    name = f"{person}/{credential_id[:8]}"
    info = {"person": person, "credential_id": credential_id, "public_key": public_key, "label": label}
    await broker.store.add_credential(PASSKEY, name, credential_digest(credential_id), info, person)
    await broker.store.count_signature(credential_digest(credential_id), count)
    response = JSONResponse({"ok": True, "person": person, "next": "/"})
    await web(http).sessions.start(http, response, person=person)
    return response


async def signin_options(http: HttpRequest) -> Response:
    challenge, state = _ceremonies(http).start("signin", "")
    return JSONResponse(
        {"options": json.loads(authentication_options(_party(http), challenge, [])), "state": state}
    )


async def signin(http: HttpRequest) -> Response:
    data = await _body(http)
    broker = await web(http).broker()
    try:
        challenge, _, nonce = _ceremonies(http).read(data.get("state"), "signin")
        passkey = await checked_assertion(http, broker, challenge, data.get("credential"))
    except PasskeyError as exc:
        raise Problem(401, str(exc), api=True) from None
    if not await broker.first_seen(SPENT, nonce):
        raise Problem(409, "This page was already used: reload it and try again.", api=True)
    await broker.record(None, "signed_in", passkey.person, {"passkey": passkey.name})
    then = data.get("next")
    response = JSONResponse({"ok": True, "person": passkey.person, "next": then if _local(then) else "/"})
    await web(http).sessions.start(http, response, person=passkey.person)
    return response


async def checked_assertion(http: HttpRequest, broker: Broker, challenge: bytes, credential: Any) -> Passkey:
    """The live passkey of a person of ``people:`` that made this assertion, checked: signature,
    challenge, origin, user verification, and a sign count that went up (one conditional write)."""
    digest = credential_digest(credential_id_of(credential))
    row = await broker.store.credential(PASSKEY, digest)
    if row is None:
        raise PasskeyError("This passkey is not known here (it may have been removed).")
    passkey = Passkey.of(row.name, row.data, row.created_at)
    if passkey.person not in broker.policy.people:
        raise PasskeyError(f"{passkey.person} is no longer among the people this server knows.")
    count = verify_assertion(_party(http), challenge, credential, passkey)
    if not await broker.store.count_signature(digest, count):
        await broker.record(
            None, "passkey_refused", passkey.person, {"passkey": passkey.name, "count": count}
        )
        raise PasskeyError("the sign count did not go up (a copied passkey, or an answer sent twice)")
    return passkey


async def _api(invite: Any) -> tuple[Broker, str]:
    try:
        found: tuple[Broker, str] = await invite
    except Problem as problem:
        raise Problem(problem.status_code, problem.message, api=True) from None
    return found


def _local(then: Any) -> bool:
    return isinstance(then, str) and then.startswith("/") and not then.startswith("//") and len(then) < 500


routes: list[BaseRoute] = [
    Route("/enrol/{person}/{token}", enrol_page, methods=["GET"]),
    Route("/enrol/{person}/{token}/options", enrol_options, methods=["POST"]),
    Route("/enrol/{person}/{token}", enrol, methods=["POST"]),
    Route("/login/passkey/options", signin_options, methods=["POST"]),
    Route("/login/passkey", signin, methods=["POST"]),
]
