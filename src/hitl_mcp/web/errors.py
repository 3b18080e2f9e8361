"""Errors an endpoint raises; ``app.py`` renders them, as JSON or as a page, by the Accept header.

``Problem`` carries the status and the one sentence for the person, plus what each rendering needs:
``extra`` for the JSON body (``{"ok": false, "error": ..., **extra}``), and for a page the template and
its context (``message.html`` unless said otherwise). ``api=True`` answers JSON whatever the Accept
header says (the JSON API). ``SignedOut`` is the one answer to missing credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException

#: what the JSON API says to a request without the web token or a session
NO_TOKEN = "missing or wrong web token"


class Problem(HTTPException):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        title: str = "Not found",
        request_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
        api: bool = False,
        template: str = "message.html",
        context: Mapping[str, Any] | None = None,
        page: str = "message",
        html_status: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status, message, dict(headers) if headers else None)
        self.message = message
        self.title = title
        self.request_id = request_id
        self.extra = dict(extra or {})
        self.api = api
        self.template = template
        self.context = dict(context or {})
        self.page = page
        self.html_status = html_status or status


class SignedOut(Problem):
    """No bearer token and no live session: the JSON API says so; a page offers to sign in."""

    def __init__(self, *, api: bool = False, then: str | None = None) -> None:
        super().__init__(401, NO_TOKEN if api else "Sign in first.", api=api)
        self.then = then
