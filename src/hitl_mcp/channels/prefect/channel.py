"""Prefect: remember the flow run a request came from, and resume it once the request is settled."""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING, Any

from hitl_mcp import __version__
from hitl_mcp.channels.base import Channel, ChannelConfig, Delivery, DeliveryError, Hub
from hitl_mcp.channels.prefect.config import Config
from hitl_mcp.core.models import Request
from hitl_mcp.core.retry import retry_after

if TYPE_CHECKING:
    import httpx2

#: the idempotency key ``hitl_mcp.client.prefect`` gives: ``prefect:<flow run id>:<the rest>``
FLOW_RUN_KEY = re.compile(r"^prefect:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}):")
#: the Suspended state's pause key ``hitl_mcp.client.prefect`` gives, for request ``<id>``
PAUSE_KEY = "hitl-mcp-{id}-"
#: a flow run not suspended yet (it asked, and suspends next): the retraction is tried again this soon
NOT_YET_SECONDS = 2.0
#: the outcome's fields a flow reads from its run input (``hitl_mcp.client.prefect.RunInput``)
RUN_INPUT_FIELDS = ("answer", "choice", "approved", "comment", "responder", "person", "channel")
DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED", "CRASHED", "CANCELLING"})


def flow_run_of(request: Request) -> str | None:
    """The flow run a request came from, as its idempotency key names it."""
    found = FLOW_RUN_KEY.match(request.idempotency_key or "")
    return found.group(1) if found else None


def run_input(request: Request) -> dict[str, Any]:
    """What the flow run is resumed with: the request's id and status and its outcome."""
    data: dict[str, Any] = {"request_id": request.id, "status": request.status.value}
    data.update({name: getattr(request, name) for name in RUN_INPUT_FIELDS})
    return data


class PrefectChannel(Channel):
    type = "prefect"

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        assert isinstance(config, Config)
        self.cfg = config

    def may_approve(self, risk: str | None) -> bool:
        return False  # nobody answers here: an approval needs a channel a person answers beside it

    # --- Prefect's API ---------------------------------------------------------------------------

    def _client(self) -> httpx2.AsyncClient:
        import httpx2

        headers = {"user-agent": f"hitl-mcp/{__version__}"}
        if self.cfg.api_key is not None:
            headers["authorization"] = f"Bearer {self.cfg.api_key.get_secret_value()}"
        elif self.cfg.auth_string is not None:
            basic = base64.b64encode(self.cfg.auth_string.get_secret_value().encode()).decode()
            headers["authorization"] = f"Basic {basic}"
        return httpx2.AsyncClient(base_url=self.cfg.api_url, headers=headers, timeout=self.cfg.timeout)

    async def _api(self, method: str, path: str, what: str, json: Any = None) -> Any:
        """Prefect's JSON answer; ``DeliveryError`` naming ``what`` otherwise (retried, but for a
        4xx other than 408 and 429, which the same call would get again)."""
        import httpx2

        try:
            async with self._client() as http:
                response = await http.request(method, path, json=json)
        except httpx2.TimeoutException:
            raise DeliveryError(f"{what}: Prefect gave no answer within {self.cfg.timeout:g}s") from None
        except httpx2.TransportError as exc:
            raise DeliveryError(f"{what}: cannot reach Prefect's API ({type(exc).__name__})") from None
        status = response.status_code
        if status < 300:
            return response.json() if response.content else None
        permanent = 400 <= status < 500 and status not in (408, 429)
        hint = " (check api_key or auth_string)" if status in (401, 403) else ""
        raise DeliveryError(
            f"{what}: Prefect's API answered HTTP {status}{hint}",
            retry_after=retry_after(response.headers),
            permanent=permanent,
        )

    async def check(self) -> str:
        await self._api("GET", "/health", "health check")
        return f"Prefect's API at {self.cfg.api_url} answers"

    # --- the protocol ------------------------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        """Note the flow run (it must exist); nothing is sent to anyone."""
        flow_run = flow_run_of(request)
        if flow_run is None:
            raise DeliveryError(
                "not asked from a Prefect flow run: its idempotency_key does not name one "
                "(hitl_mcp.client.prefect gives prefect:<flow run id>:...)",
                permanent=True,
            )
        run = await self._api("GET", f"/flow_runs/{flow_run}", f"flow run {flow_run}")
        return Delivery(ref=flow_run, detail={"flow_run": run.get("name") or flow_run})

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Resume the flow run, suspended for this request, with the outcome as its input."""
        flow_run = delivery.ref or flow_run_of(request)
        if flow_run is None:
            return
        what = f"resuming flow run {flow_run}"
        run = await self._api("GET", f"/flow_runs/{flow_run}", what)
        state = run.get("state") or {}
        kind = state.get("type")
        if kind in DONE:
            self.log.info("%s: flow run %s is %s already: nothing to resume", self.name, flow_run, kind)
            return
        mine = PAUSE_KEY.format(id=request.id)
        if kind != "PAUSED" or not str((state.get("state_details") or {}).get("pause_key")).startswith(mine):
            if await self._suspended_before(flow_run, mine):
                return  # resumed already (by an earlier try, or by hand in Prefect's UI)
            raise DeliveryError(
                f"{what}: it is {kind or 'in no state'}, not suspended for this request yet",
                retry_after=NOT_YET_SECONDS,
            )
        result = await self._api(
            "POST", f"/flow_runs/{flow_run}/resume", what, {"run_input": run_input(request)}
        )
        status = (result or {}).get("status")
        if status != "ACCEPT":
            reason = ((result or {}).get("details") or {}).get("reason") or "no reason given"
            raise DeliveryError(f"{what}: Prefect said {status}: {reason}", permanent=status == "REJECT")

    async def _suspended_before(self, flow_run: str, pause_key: str) -> bool:
        """Whether the flow run was suspended for this request before: Prefect keeps the run input's
        schema under ``suspended-<pause key>...``."""
        body = {"prefix": f"suspended-{pause_key}", "limit": 1}
        found = await self._api("POST", f"/flow_runs/{flow_run}/input/filter", f"flow run {flow_run}", body)
        return bool(found)
