"""Web Push: the channel. A request goes to every device of the people it asks (``to``, a quorum's
``of``), or, asked of no one in particular, to every device; once it settles, the same devices get
the outcome under the same tag (or, cancelled, the notification is withdrawn). Answers come back
from the service worker as a single-use token (``answers.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio
import httpx2

from hitl_mcp.channels.base import ChannelConfig, Delivery, DeliveryError, Hub
from hitl_mcp.channels.fitting import Room, approve_here, shown
from hitl_mcp.channels.webpush import compose
from hitl_mcp.channels.webpush.answers import Answers
from hitl_mcp.channels.webpush.config import HTTP_TIMEOUT, PREVIEW_BYTES, Config
from hitl_mcp.channels.webpush.devices import DEVICE, Device, state_key
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.core.store import CredentialRow
from hitl_mcp.core.wording import still_waiting

if TYPE_CHECKING:  # pywebpush is imported when the channel pushes: a config check needs none of it
    from hitl_mcp.channels.webpush.push import Keys
    from hitl_mcp.core.escalation import Policy

__all__ = ["DeviceHub", "WebPushChannel"]


class DeviceHub(Hub, Protocol):
    """What this channel asks of the broker beyond the kit: the devices people turned on."""

    async def live_credentials(self, kind: str) -> list[CredentialRow]: ...

    async def revoke_credential(self, kind: str, name: str, actor: str) -> bool: ...

    async def policy_now(self) -> Policy: ...


class WebPushChannel(Answers):
    type = "webpush"
    extra = "webpush"
    config: Config
    http_timeout: float = HTTP_TIMEOUT

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("pywebpush", "py_vapid")

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        assert isinstance(config, Config)
        self._client: httpx2.AsyncClient | None = None
        self._keys: Keys | None = None

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._client = httpx2.AsyncClient(timeout=self.http_timeout, follow_redirects=False)
        self.keys  # noqa: B018 - made (or read) once, at start

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[httpx2.AsyncClient]:
        if self._client is not None:
            yield self._client
            return
        client = httpx2.AsyncClient(timeout=self.http_timeout, follow_redirects=False)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    @property
    def keys(self) -> Keys:
        """The VAPID key pair: the config's, else made once in the state directory."""
        if self._keys is None:
            from hitl_mcp.channels.webpush.push import Keys

            configured = self.config.vapid_private_key
            self._keys = Keys.load(
                configured.get_secret_value() if configured else None, self.hub.state_dir, self.subject
            )
        return self._keys

    @property
    def subject(self) -> str:
        if self.config.subject:
            return self.config.subject
        url = self.public_url or ""
        return url.rstrip("/") if url.startswith("https://") else "mailto:hitl-mcp@localhost"

    @property
    def _devices_hub(self) -> DeviceHub:
        return cast(DeviceHub, self.hub)

    async def devices(self) -> list[Device]:
        """The devices turned on (those whose subscription is kept)."""
        found = []
        for row in await self._devices_hub.live_credentials(DEVICE):
            secret = await self.hub.state_get(DEVICE, state_key(row.name.rpartition("/")[2]))
            if secret:
                found.append(Device.of(row.name, row.data, row.created_at, secret))
        return found

    async def forget(self, device: Device, why: str) -> None:
        await self._devices_hub.revoke_credential(DEVICE, device.name, f"push service ({why})")
        await self.hub.state_set(DEVICE, device.key, "")
        self.log.info("%s: removed device %s of %s: %s", self.name, device.id, device.holder, why)

    # --- the protocol ----------------------------------------------------------------------

    def preview_room(self) -> Room | None:
        return Room(PREVIEW_BYTES, "bytes")

    async def check(self) -> str:
        """The configured VAPID key is usable (``check`` runs with no hub: a key made in the state
        directory is made at the first start)."""
        configured = self.config.vapid_private_key
        if configured is None:
            return "ok: the VAPID key is made once in the state directory (webpush-vapid.key)"
        from hitl_mcp.channels.webpush.push import Keys

        try:
            public = Keys.load(configured.get_secret_value(), self.hub.state_dir if self.hub else None, "x")
            key = public.public_key
        except Exception:
            raise DeliveryError(
                "webpush: vapid_private_key is not a P-256 private key (URL-safe base64 of 32 bytes, or PEM)"
            ) from None
        return f"ok: VAPID public key {key[:16]}…"

    async def asked(self, request: Request) -> set[str]:
        """The people a request asks, and who stands in for those of them who are away now."""
        asked = set(asked_of(request))
        if asked:
            policy = await self._devices_hub.policy_now()
            asked |= set(policy.delegated(sorted(asked)).values())
        return asked

    async def deliver(self, request: Request) -> Delivery:
        devices = recipients(await self.asked(request), await self.devices())
        if not devices:
            asked = ", ".join(asked_of(request)) or "anyone"
            raise DeliveryError(
                f"webpush: no device of {asked} has notifications turned on (the inbox's bell button)",
                permanent=True,
            )
        sent = await self._push_all(
            request, devices, f"sent:{request.id}", lambda d: self._waiting(request, d)
        )
        if not sent:
            raise DeliveryError("webpush: every device of the people asked is gone", permanent=True)
        return Delivery(ref=request.id, detail={"devices": sent})

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        again = request.model_copy(update={"text": still_waiting(request.text)})
        devices = await self._of(delivery)
        await self._push_all(again, devices, f"{key}:{request.id}", lambda d: self._waiting(again, d))
        return delivery

    async def retract(self, request: Request, delivery: Delivery) -> None:
        devices = await self._of(delivery)
        if request.status == Status.CANCELLED:
            push = compose.withdrawn(request)
        else:
            push = compose.settled(request, show_payload=self.config.show_payload)
        await self._push_all(request, devices, f"settled:{request.id}", lambda _: push, urgency="normal")

    # --- pushing ---------------------------------------------------------------------------

    def _waiting(self, request: Request, device: Device) -> compose.Push:
        show = self.config.show_payload
        why_not = approve_here(self, request)
        tokens = None
        if (
            show
            and request.kind == Kind.APPROVAL
            and device.person is not None
            and not request.step_up
            and why_not is None
        ):
            tokens = {d: self.issue(request, d, device) for d in ("approve", "deny")}
        return compose.waiting(
            request,
            show_payload=show,
            preview=shown(self, request) if show else None,
            why_not=why_not,
            tokens=tokens,
            answer_url=self.answer_path,
        )

    async def _of(self, delivery: Delivery) -> list[Device]:
        names = set(delivery.detail.get("devices") or [])
        return [d for d in await self.devices() if d.name in names]

    async def _push_all(
        self,
        request: Request,
        devices: Sequence[Device],
        mark: str,
        build: Callable[[Device], compose.Push],
        urgency: str | None = None,
    ) -> list[str]:
        """Push to each device not pushed to yet under ``mark`` (a retry after a 429 or 5xx skips
        those that got it); a device the push service no longer knows is removed. Raises the first
        retryable failure once every device was tried (the outbox retries); a device that refuses
        for good is logged and passed over, unless none took it."""
        from hitl_mcp.channels.webpush.push import Gone, send

        done: list[str] = list(await self.state.load(mark, []))
        failure: DeliveryError | None = None
        refused: DeliveryError | None = None
        at = now()
        async with self._http() as client:
            for device in devices:
                if device.name in done:
                    continue
                payload = compose.encoded(build(device))
                try:
                    await send(
                        client,
                        self.keys,
                        device,
                        payload,
                        ttl=compose.ttl(request, at),
                        urgency=urgency or compose.urgency(request),
                        request_id=request.id,
                    )
                except Gone as gone:
                    await self.forget(device, f"HTTP {gone.status}: the subscription is gone")
                    continue
                except DeliveryError as exc:
                    if exc.permanent:
                        self.log.warning("%s: device %s of %s: %s", self.name, device.id, device.holder, exc)
                        refused = refused or exc
                    else:
                        failure = failure or exc
                    continue
                done.append(device.name)
        if done:
            await self.state.save(mark, done)
        if failure is not None:
            raise failure
        if refused is not None and not done:
            raise refused
        return done


def asked_of(request: Request) -> list[str]:
    return list(dict.fromkeys([*(request.to or []), *(request.approvals.of if request.approvals else [])]))


def recipients(asked: set[str], devices: Sequence[Device]) -> list[Device]:
    """The devices a request goes to: those of the people it asks (and their delegates); asked of no
    one in particular, every device (the operator's too, which get Open only)."""
    if not asked:
        return list(devices)
    return [d for d in devices if d.person in asked]
