"""A channel for tests, shipped with the kit (like httpx's ``MockTransport``): it goes through the
real :class:`~hitl_mcp.channels.base.Channel` interface, so a test drives the broker, the outbox and
the kit's answer path exactly as a provider channel would.

- ``deliver``, ``retract`` and ``remind`` record the calls (``sent``, ``delivered``, ``retracted``,
  ``reminded``), and sends can be made to fail; ``digest`` sets the config's window; ``room``
  how much of a preview it shows (``fitting``);
- ``reply(...)`` is its inbound: a person's verified reply, through :meth:`Channel.answer`;
- ``changed`` is an event set after every call, to wait on.

It is not a channel type: discovery skips this module, and a config cannot name it.
"""

from __future__ import annotations

from typing import Any

import anyio

from hitl_mcp.channels.base import Channel, ChannelConfig, Delivery, DeliveryError, Hub, Outcome
from hitl_mcp.channels.fitting import Room
from hitl_mcp.core.models import Reply, Request, Status


class TestChannel(Channel):
    """Records what it is sent; fails its first ``failures`` sends (``permanent`` ones, if asked)."""

    __test__ = False  # not a pytest test class
    type = "testing"

    def __init__(
        self,
        name: str,
        failures: int = 0,
        permanent: bool = False,
        hub: Hub | None = None,
        digest: float | None = None,
        room: Room | None = None,
    ) -> None:
        config = ChannelConfig(type="testing", digest=digest)
        super().__init__(name, config, hub)  # type: ignore[arg-type]
        self.failures = failures
        self.permanent = permanent
        self.sent: list[str] = []
        self.delivered: list[Request] = []
        """What ``deliver`` was given, in order (``sent`` has their ids): a digest's text, say."""
        self.retracted: list[tuple[str, Status, str | None]] = []
        self.reminded: list[tuple[str, str | None]] = []
        """(request id, the ref of the message reminded of): a threaded reminder, as Slack's would be."""
        self.changed = anyio.Event()
        self.room = room
        """How much of a preview it shows (``fitting``); None: all of it."""

    def preview_room(self) -> Room | None:
        return self.room

    def _changed(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def deliver(self, request: Request) -> Delivery:
        if self.failures > 0:
            self.failures -= 1
            self._changed()
            raise DeliveryError("provider said 429", retry_after=0.01, permanent=self.permanent)
        self.sent.append(request.id)
        self.delivered.append(request)
        self._changed()
        return Delivery(ref=f"msg-{len(self.sent)}")

    async def retract(self, request: Request, delivery: Delivery) -> None:
        self.retracted.append((request.id, request.status, delivery.ref))
        self._changed()

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        self.reminded.append((request.id, delivery.ref))
        self._changed()
        return Delivery(ref=f"reminder-{len(self.reminded)}")

    async def reply(self, request_id: str, responder: str = "tester", **fields: Any) -> Outcome:
        """A person answers here: ``await channel.reply(rid, decision="approve")``."""
        reply = Reply(channel=self.name, responder=responder, identity=responder, **fields)
        return await self.answer(request_id, reply)
