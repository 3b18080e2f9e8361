"""What every inbox page needs: the templates and their globals, the security headers, cache-busted
static URLs, and the one way a form body is read."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment, PackageLoader
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse

from hitl_mcp import __version__
from hitl_mcp.core.models import Kind, Status, canonical_json, iso
from hitl_mcp.core.previews import summary
from hitl_mcp.core.wording import trail_by, trail_data
from hitl_mcp.kit.net import read_within
from hitl_mcp.web import MAX_BODY
from hitl_mcp.web.previews import fits_card, preview_html
from hitl_mcp.web.views import (
    agent_name,
    ago,
    clock,
    expires_soon,
    outcome_line,
    pretty_json,
    session_label,
    time_left,
    visible_payload,
)

STATIC_DIR = Path(__file__).parent / "static"

PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; manifest-src 'self'; worker-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


@cache
def asset_version(name: str) -> str:
    """A content hash for cache busting: ``/static/app.css?v=<hash>``."""
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:10]


def static_url(name: str) -> str:
    return f"/static/{name}?v={asset_version(name)}"


SHELL = (
    "app.css",
    "app.js",
    "passkeys.js",
    "push.js",
    "icon.svg",
    "icon-192.png",
    "icon-512.png",
    "offline.html",
)


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("hitl_mcp.web", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        version=__version__,
        static=static_url,
        iso=iso,
        clock=clock,
        ago=ago,
        time_left=time_left,
        expires_soon=expires_soon,
        pretty_json=pretty_json,
        visible_payload=visible_payload,
        compact_json=canonical_json,
        preview_html=preview_html,
        preview_summary=summary,
        fits_card=fits_card,
        trail_by=trail_by,
        trail_data=trail_data,
        outcome_line=outcome_line,
        agent_name=agent_name,
        session_label=session_label,
        Kind=Kind,
        Status=Status,
    )
    return env


ENV = _environment()


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = ENV.get_template(name).render(**context)
    return HTMLResponse(html, status, headers=PAGE_HEADERS)


def wants_json(http: HttpRequest) -> bool:
    return "application/json" in http.headers.get("accept", "")


def safe_next(value: str | None) -> str:
    """Only a local path: never another site (``//host``) or a scheme."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


async def read_form(http: HttpRequest) -> tuple[dict[str, str] | None, tuple[int, str] | None]:
    """The urlencoded body, read up to ``MAX_BODY`` bytes; or the status and message refusing it."""
    body = await read_within(http.stream(), MAX_BODY)
    if body is None:
        return None, (413, f"The form is larger than {MAX_BODY} bytes.")
    ctype = http.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and ctype != "application/x-www-form-urlencoded":
        return None, (415, "Send the form as application/x-www-form-urlencoded.")
    try:  # strict: bytes that are not UTF-8, raw or %-encoded, are refused rather than replaced
        pairs = parse_qsl(
            body.decode(), keep_blank_values=True, max_num_fields=20, encoding="utf-8", errors="strict"
        )
    except UnicodeDecodeError:
        return None, (400, "The form is not valid UTF-8 text.")
    except ValueError:
        return None, (400, "The form could not be read.")
    return dict(pairs), None
