"""The inbox's devices: where a signed-in person (or the operator) turns Web Push on for this browser,
sees the browsers that have it on, and turns any of theirs off.

- ``GET /devices``: the page (the operator sees everyone's), with the button that subscribes this
  browser (``push.js``: the permission is asked only when it is pressed, never on page load).
- ``GET /webpush/key``: the VAPID public key the browser subscribes with.
- ``POST /webpush/devices``: keep this browser's subscription (JSON, with the CSRF header).
- ``POST /devices/{id}/remove``: turn one off (a form, or JSON).

A device is a stored credential (``channels.webpush.devices``); its subscription is kept apart.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.broker import Broker
from hitl_mcp.channels.webpush.devices import (
    DEVICE,
    OPERATOR_HOLDER,
    Device,
    DeviceError,
    endpoint_digest,
    parse_subscription,
    state_key,
)
from hitl_mcp.core.store import KeyConflict
from hitl_mcp.web.deps import page_context, read_post, requires, web
from hitl_mcp.web.errors import Problem
from hitl_mcp.web.pagekit import render, wants_json
from hitl_mcp.web.people import Who, who

#: the largest subscription body accepted
MAX_BODY = 8 * 1024


async def turn_on(broker: Broker, device: Device, actor: str) -> None:
    """Keep a device: its subscription first (in the ``webpush`` state namespace), then the
    credential; the same browser subscribing again refreshes its keys."""
    await broker.state_set(DEVICE, device.key, device.secret())
    try:
        digest = endpoint_digest(device.endpoint)
        await broker.store.add_credential(DEVICE, device.name, digest, device.data(), actor)
    except KeyConflict:
        pass  # on already


async def turn_off(broker: Broker, name: str, actor: str) -> bool:
    """Revoke a device and forget its subscription; whether it was on."""
    gone = await broker.store.revoke_credential(DEVICE, name, actor)
    await broker.state_set(DEVICE, state_key(name.rpartition("/")[2]), "")
    return gone is not None


async def listed(broker: Broker, holder: Who | None = None) -> list[dict[str, Any]]:
    """The devices turned on (of ``holder``, when given, unless the operator: everyone's)."""
    rows = await broker.live_credentials(DEVICE)
    found = []
    for row in rows:
        person = row.data.get("person") or None
        if holder is not None and not holder.is_operator and person != holder.person:
            continue
        found.append(
            {
                "id": row.name.rpartition("/")[2],
                "name": row.name,
                "holder": person or OPERATOR_HOLDER,
                "label": row.data.get("label", ""),
                "service": row.data.get("service", ""),
                "created_at": row.created_at,
            }
        )
    return found


def _push_channel(broker: Broker) -> Any:
    """The first channel of type webpush, or None."""
    return next((c for c in broker.channels.values() if c.type == "webpush"), None)


@requires()
async def devices_page(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    found = await who(http)
    devices = await listed(broker, found)
    if wants_json(http):
        return JSONResponse({"devices": devices})
    return render(
        "devices.html",
        devices=devices,
        **await page_context(http, "devices"),
    )


@requires(api=True)
async def public_key(http: HttpRequest) -> Response:
    channel = _push_channel(await web(http).broker())
    if channel is None:
        raise Problem(404, "Web Push is not configured on this server (a channel of type webpush).", api=True)
    return JSONResponse({"public_key": channel.keys.public_key})


@requires(api=True, csrf_header=True)
async def subscribe(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    if _push_channel(broker) is None:
        raise Problem(404, "Web Push is not configured on this server (a channel of type webpush).", api=True)
    body = await http.body()
    if len(body) > MAX_BODY:
        raise Problem(413, "Too large.", api=True)
    try:
        data = json.loads(body or b"null")
    except (ValueError, RecursionError):
        raise Problem(400, "The body is not JSON.", api=True) from None
    found = await who(http)
    person = found.person if found is not None else None
    label = data.get("label") if isinstance(data, dict) else None
    try:
        device = parse_subscription(
            data.get("subscription") if isinstance(data, dict) else None,
            person,
            label if isinstance(label, str) else "",
        )
    except DeviceError as exc:
        raise Problem(400, str(exc), api=True) from None
    await turn_on(broker, device, person or OPERATOR_HOLDER)
    return JSONResponse({"ok": True, "device": device.listed()})


@requires()
async def remove(http: HttpRequest) -> Response:
    await read_post(http, "Not removed")  # the CSRF token: the form's field, or X-CSRF-Token
    broker = await web(http).broker()
    found = await who(http)
    device_id = http.path_params["id"]
    mine = [d for d in await listed(broker, found) if d["id"] == device_id]
    if not mine:
        raise Problem(404, "There is no such device of yours.", title="Not removed", api=wants_json(http))
    actor = found.label if found is not None else OPERATOR_HOLDER
    await turn_off(broker, mine[0]["name"], actor)
    if wants_json(http):
        return JSONResponse({"ok": True})
    return RedirectResponse("/devices", status_code=303)


routes: list[BaseRoute] = [
    Route("/devices", devices_page, methods=["GET"]),
    Route("/devices/{id}/remove", remove, methods=["POST"]),
    Route("/webpush/key", public_key, methods=["GET"]),
    Route("/webpush/devices", subscribe, methods=["POST"]),
]
