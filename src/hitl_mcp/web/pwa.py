"""The inbox as an installable app: its manifest, the service worker that caches the shell, and the
static files (cache-busted by content hash, see ``pagekit.static_url``). No auth: none of it says
anything about requests."""

from __future__ import annotations

import hashlib

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from hitl_mcp.web.pagekit import ENV, SHELL, STATIC_DIR, static_url


async def manifest(_: HttpRequest) -> Response:
    return JSONResponse(
        {
            "name": "hitl-mcp inbox",
            "short_name": "hitl inbox",
            "description": "Answer your AI agents' questions and approvals.",
            "id": "/",
            "start_url": "/",
            "scope": "/",
            "display": "standalone",
            "background_color": "#f5f6f8",
            "theme_color": "#4338ca",
            "icons": [
                {"src": static_url("icon-192.png"), "sizes": "192x192", "type": "image/png"},
                {"src": static_url("icon-512.png"), "sizes": "512x512", "type": "image/png"},
                {
                    "src": static_url("icon-512.png"),
                    "sizes": "512x512",
                    "type": "image/png",
                    "purpose": "maskable",
                },
                {"src": static_url("icon.svg"), "sizes": "any", "type": "image/svg+xml"},
            ],
        },
        media_type="application/manifest+json",
    )


async def service_worker(_: HttpRequest) -> Response:
    shell = [static_url(name) for name in SHELL]
    body = ENV.get_template("sw.js").render(shell=shell, cache_name="hitl-shell-" + _shell_hash(shell))
    return Response(
        body,
        media_type="text/javascript",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


def _shell_hash(urls: list[str]) -> str:
    return hashlib.sha256("\n".join(urls).encode()).hexdigest()[:10]


routes: list[BaseRoute] = [
    Route("/manifest.webmanifest", manifest, methods=["GET"]),
    Route("/sw.js", service_worker, methods=["GET"]),
    Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
]
