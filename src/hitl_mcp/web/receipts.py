"""Receipts over HTTP: ``GET /api/requests/{id}/receipt`` (a request's signed receipts: its decision's
and its outcomes', with the claims decoded; the web token or a session), and
``GET /.well-known/jwks.json`` (every key that ever signed one: no credentials, it is public)."""

from __future__ import annotations

import json

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.kit.jws import parse
from hitl_mcp.store.seal import published
from hitl_mcp.web.deps import requires, web
from hitl_mcp.web.errors import Problem


@requires(api=True)
async def request_receipts(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    request = await broker.get(http.path_params["id"])
    if request is None:
        raise Problem(404, "no such request", api=True)
    rows = await broker.history.receipts(request.id)
    return JSONResponse(
        {
            "request_id": request.id,
            "receipts": [
                {
                    "kind": row.kind,
                    "receipt_id": row.receipt_id,
                    "kid": row.kid,
                    "hash": row.hash,
                    "token": row.token,
                    "claims": json.loads(parse(row.token)[1]),
                }
                for row in rows
            ],
        }
    )


async def jwks(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    keys = await published(broker.store)
    return JSONResponse({"keys": keys}, headers={"Cache-Control": "public, max-age=300"})


routes: list[BaseRoute] = [
    Route("/api/requests/{id}/receipt", request_receipts, methods=["GET"]),
    Route("/.well-known/jwks.json", jwks, methods=["GET"]),
]
