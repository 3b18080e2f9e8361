"""Email: answer links and their confirmation page."""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import (
    Answered,
    Invalid,
    Late,
)
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.email.common import LINK_PATH, Link, _settled_text
from hitl_mcp.channels.email.config import Config
from hitl_mcp.core.models import Kind, Reply, Request, Status, now


class _Links(BaseChannel):
    """The email channel's answer links: a confirmation page (scanners fetch links), then one POST."""

    config: Config
    allowed: set[str]  # set by EmailChannel.__init__

    if TYPE_CHECKING:  # _Composing's, in EmailChannel

        def read_link(self, token: str) -> Link | None: ...

    # --- links -------------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        return [Route(LINK_PATH, self._link_endpoint, methods=["GET", "POST"])]

    async def _link_endpoint(self, http: HttpRequest) -> Response:
        link = self.read_link(http.path_params["token"])
        if link is None:
            return _page("Link not valid", "<p>This link is not valid. Copy it whole from the mail.</p>", 404)
        if link.expires < now():
            return _page("Link expired", "<p>This answer link has expired.</p>", 410)
        if link.recipient not in self.allowed:
            return _page("Not allowed", "<p>This address may no longer answer here.</p>", 403)
        request = await self.hub.get(link.request_id)
        if request is None or request.kind == Kind.NOTIFICATION:
            return _page("Link not valid", "<p>There is no such request.</p>", 404)
        label = _answer_label(request, link.answer)
        if label is None:
            return _page("Link not valid", "<p>This link is not valid.</p>", 404)
        if request.status != Status.PENDING:
            return _page("Already settled", f"<p>{html.escape(_settled_text(request))}</p>", 409)
        if http.method != "POST":  # GET and HEAD (what link scanners send) never change anything
            return _page("Confirm your answer", _confirm_form(request, link, label))
        return await self._link_post(http, request, link, label)

    async def _link_post(self, http: HttpRequest, request: Request, link: Link, label: str) -> Response:
        origin = http.headers.get("origin")
        if origin is not None and self.public_url is not None:
            expected = urlsplit(self.public_url)
            if origin.rstrip("/") != f"{expected.scheme}://{expected.netloc}":
                return _page("Refused", "<p>This form was sent from another site.</p>", 403)
        length = http.headers.get("content-length") or "0"
        if not length.isdigit() or int(length) > 64 * 1024:
            return _page("Too large", "<p>The answer is too long.</p>", 413)
        form = await http.form(max_files=0, max_fields=10)
        if form.get("confirm") != "yes":
            return _page("Not confirmed", "<p>Use the button on the confirmation page.</p>", 400)
        comment = str(form.get("comment") or "").strip()[:4000] or None
        reply_kw: dict[str, Any] = {}
        if link.answer in ("approve", "deny"):
            reply_kw = {"decision": link.answer, "comment": comment}
        elif link.answer == "text":
            text = str(form.get("text") or "").strip()
            if not text or len(text) > 8000:
                return _page(
                    "Empty answer", "<p>Write an answer (up to 8000 characters), then send it.</p>", 422
                )
            reply_kw = {"text": text}
        else:
            reply_kw = {"choice": label, "comment": comment}
        if await self.state.seen("link:" + link.nonce):
            return _page("Link already used", "<p>This link was already used; each link works once.</p>", 409)
        reply = Reply(channel=self.name, responder=link.recipient, identity=link.recipient, **reply_kw)
        match await self.answer(request.id, reply):
            case Answered():
                return _page(
                    "Thank you", f"<p>Recorded: <b>{html.escape(label)}</b>. You can close this page.</p>"
                )
            case Late(settled):
                return _page("Already settled", f"<p>{html.escape(_settled_text(settled))}</p>", 409)
            case Invalid(_, reason):
                return _page("Not accepted", f"<p>{html.escape(reason)}</p>", 422)
            case _:
                return _page("Link not valid", "<p>There is no such request.</p>", 404)


def _answer_label(request: Request, code: str) -> str | None:
    if request.kind == Kind.APPROVAL:
        return {"approve": "Approve", "deny": "Deny"}.get(code)
    if code == "text":
        return "Your answer"
    m = re.fullmatch(r"c(\d+)", code)
    if m is not None and request.choices and int(m.group(1)) < len(request.choices):
        return request.choices[int(m.group(1))]
    return None


def _confirm_form(request: Request, link: Link, label: str) -> str:
    esc = html.escape
    kind = "Approve this?" if request.kind == Kind.APPROVAL else "Question"
    body = [f"<p><b>{esc(kind)}</b></p><p>{esc(request.text)}</p>".replace("\n", "<br>")]
    if request.details:
        body.append(f"<pre>{esc(request.details)}</pre>")
    if request.payload_sha256:
        body.append(f"<p>Payload SHA-256: <code>{esc(request.payload_sha256)}</code></p>")
    body.append(f"<p>Answering as <b>{esc(link.recipient)}</b>. This link works once.</p>")
    body.append('<form method="post"><input type="hidden" name="confirm" value="yes">')
    if link.answer == "text":
        body.append('<p><textarea name="text" rows="5" cols="60" required maxlength="8000"></textarea></p>')
        button = "Send answer"
    else:
        body.append(
            '<p><label>Comment (optional)<br><textarea name="comment" rows="3" cols="60" maxlength="4000">'
        )
        body.append("</textarea></label></p>")
        button = label if request.kind == Kind.APPROVAL else f"Answer: {label}"
    body.append(f'<p><button type="submit">{esc(button)}</button></p></form>')
    return "".join(body)


_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    """A small self-contained page: no scripts, no outside resources, never framed or cached."""
    doc = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)} · hitl-mcp</title>"
        "<style>body{font-family:sans-serif;max-width:40em;margin:2em auto;padding:0 1em}"
        "pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap}"
        "button{font-size:1.1em;padding:.5em 1.5em}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    headers = {
        "Cache-Control": "no-store",
        "Content-Security-Policy": _CSP,
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
        "X-Content-Type-Options": "nosniff",
    }
    return HTMLResponse(doc, status_code=status, headers=headers)
