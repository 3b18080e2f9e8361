"""The outbox: every send and retraction is a delivery row first, then an attempt.

Rows are claimed with a lease, so several processes sharing one database never send the same
row at once, and a row whose process died mid-send is picked up again after the lease.
Failures are retried with backoff (a provider's ``retry_after`` wins); permanent ones are not.
Info notifications held for a channel's digest are sent together once their window closes
(``hitl_mcp.broker.digests``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import anyio

from hitl_mcp.broker.digests import compose, digested
from hitl_mcp.broker.digests import window as digest_window
from hitl_mcp.channels.base import Channel, Delivery, DeliveryError
from hitl_mcp.core.models import Request, Status, now
from hitl_mcp.core.retry import RetryPolicy
from hitl_mcp.core.store import DeliveryRow, Store
from hitl_mcp.kit.loops import forever, reason

log = logging.getLogger("hitl_mcp.broker.outbox")

LEASE_SECONDS = 60.0
ATTEMPT_TIMEOUT = 30.0
MAX_ATTEMPTS = 8
POLL_SECONDS = 0.5


#: 1s, 2s, 4s ... at most 5 minutes apart, 8 attempts in all; a provider's ``retry_after`` wins
DELIVERY_RETRY = RetryPolicy(
    initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=300.0, maximum_attempts=MAX_ATTEMPTS
)


def silent_channels(channels: Mapping[str, Channel]) -> frozenset[str]:
    """The channels that send nothing when a request settles: no retraction is queued for them."""
    return frozenset(name for name, channel in channels.items() if not channel.retracts)


class Outbox:
    def __init__(self, store: Store, channels: Mapping[str, Channel]) -> None:
        self.store = store
        self.channels = channels
        self._wake = anyio.Event()
        self._attempts: anyio.abc.TaskGroup | None = None

    def kick(self) -> None:
        """Something was queued: look now instead of at the next poll."""
        self._wake.set()

    async def run_once(self) -> None:
        """Claim what is due and start an attempt on each; wait for more. One round of the loop
        the broker keeps alive (``loops.forever``): attempts run on after the round returns."""
        assert self._attempts is not None, "run_once runs inside run"
        for step in await self.store.run_due_steps(now()):
            log.info(
                "request %s: step %d (%s) queued on %s",
                step.request_id,
                step.number,
                step.label,
                step.channels,
            )
        rows = await self.store.claim_deliveries(list(self.channels), now(), LEASE_SECONDS, 64)
        solo, digests = await self._digests(rows)
        for row in solo:
            self._attempts.start_soon(self._attempt_logged, row)
        for (name, _), group in digests.items():
            self._attempts.start_soon(self._digest_logged, name, group)
        if len(rows) < 64:
            with anyio.move_on_after(POLL_SECONDS):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._attempts = tg
            await forever("the outbox", self.run_once)

    async def _attempt_logged(self, row: DeliveryRow) -> None:
        """An attempt whose bookkeeping failed (the store is locked) ends here: the row's lease runs
        out and it is claimed again."""
        try:
            await self.attempt(row)
        except Exception as exc:
            log.warning(
                "hitl-mcp: %s to %s not recorded (%s); retried after the lease",
                row.action,
                row.channel,
                reason(exc),
            )

    async def _digests(
        self, rows: list[DeliveryRow]
    ) -> tuple[list[DeliveryRow], dict[tuple[str, tuple[str, ...]], list[tuple[DeliveryRow, Request]]]]:
        """The rows to attempt one by one, and, per channel and set of people addressed, the info
        notifications whose digest window has closed (``hitl_mcp.broker.digests``): each group is sent
        as one message, addressed as its notes were (a note for alice never reaches bob's devices)."""
        solo: list[DeliveryRow] = []
        digests: dict[tuple[str, tuple[str, ...]], list[tuple[DeliveryRow, Request]]] = {}
        for row in rows:
            if row.action == "deliver" and digest_window(self.channels[row.channel]) is not None:
                request = await self.store.get(row.request_id)
                if request is not None and digested(request):
                    digests.setdefault((row.channel, tuple(sorted(set(request.to or ())))), []).append(
                        (row, request)
                    )
                    continue
            solo.append(row)
        return solo, digests

    async def _digest_logged(self, name: str, group: list[tuple[DeliveryRow, Request]]) -> None:
        try:
            await self.send_digest(name, group)
        except Exception as exc:
            log.warning(
                "hitl-mcp: digest to %s not recorded (%s); retried after the lease", name, reason(exc)
            )

    async def send_digest(self, name: str, group: list[tuple[DeliveryRow, Request]]) -> None:
        """Send these claimed notifications to channel ``name`` as one message, and record each row
        as sent; a failure leaves them queued together, retried as one digest."""
        channel = self.channels[name]
        digest = compose([request for _, request in group], name, now())
        retry_after: float | None = None
        permanent = False
        try:
            with anyio.fail_after(ATTEMPT_TIMEOUT):
                sent = await channel.deliver(digest)
        except DeliveryError as exc:
            error, retry_after, permanent = str(exc), exc.retry_after, exc.permanent
        except TimeoutError:
            error = f"no answer from {name} within {ATTEMPT_TIMEOUT:.0f}s"
        except Exception as exc:  # a channel bug must not stop the outbox; the rows record it
            log.exception("channel %s failed to send a digest", name)
            error = f"{type(exc).__name__}: {exc}"
        else:
            detail = {**sent.detail, "digest": len(group)}
            for row, _ in group:
                await self.store.finish_delivery(row.id, status="sent", ref=sent.ref, detail=detail)
            return
        attempts = max(row.attempts for row, _ in group)
        delay = retry_after if retry_after is not None else DELIVERY_RETRY.delay(attempts)
        retry_at = now() + delay  # one time for all: they stay one digest
        for row, _ in group:
            await self._failed(row, error, None, permanent, MAX_ATTEMPTS, retry_at)

    async def send_now(self, ids: Sequence[int]) -> list[DeliveryRow]:
        """Claim these rows and attempt each once, concurrently; returns their rows afterwards."""
        rows = await self.store.claim_deliveries(list(self.channels), now(), LEASE_SECONDS, len(ids), ids=ids)
        async with anyio.create_task_group() as tg:
            for row in rows:
                tg.start_soon(self.attempt, row, 1)
        return rows

    async def attempt(self, row: DeliveryRow, max_attempts: int = MAX_ATTEMPTS) -> None:
        channel = self.channels[row.channel]
        request = await self.store.get(row.request_id)
        if request is None:
            await self.store.finish_delivery(row.id, status="failed", error="request not found")
            return
        if row.action != "retract" and request.status not in (Status.PENDING, Status.NOTIFIED):
            # settled since this send (or reminder) was queued (a retry, or a lease taken over):
            # nobody needs it now
            await self.store.finish_delivery(row.id, status="skipped")
            return
        try:
            with anyio.fail_after(ATTEMPT_TIMEOUT):
                if row.action == "deliver":
                    sent = await channel.deliver(request)
                else:
                    first = Delivery()  # what the request's own send returned, for a reply or an edit
                    for other in await self.store.deliveries(row.request_id):
                        if other.action == "deliver" and other.channel == row.channel:
                            first = Delivery(ref=other.ref, detail=other.detail)
                    if row.action == "retract":
                        await channel.retract(request, first)
                        sent = Delivery()
                    else:
                        sent = await channel.remind(request, first, f"{row.action}:{row.request_id}")
        except DeliveryError as exc:
            await self._failed(row, str(exc), exc.retry_after, exc.permanent, max_attempts)
        except TimeoutError:
            await self._failed(
                row, f"no answer from {row.channel} within {ATTEMPT_TIMEOUT:.0f}s", None, False, max_attempts
            )
        except Exception as exc:  # a channel bug must not stop the outbox; the row records it
            log.exception("channel %s failed to %s request %s", row.channel, row.action, row.request_id)
            await self._failed(row, f"{type(exc).__name__}: {exc}", None, False, max_attempts)
        else:
            await self.store.finish_delivery(
                row.id, status="sent", ref=sent.ref, detail=sent.detail, silent=silent_channels(self.channels)
            )

    async def _failed(
        self,
        row: DeliveryRow,
        error: str,
        retry_after: float | None,
        permanent: bool,
        max_attempts: int,
        retry_at: float | None = None,
    ) -> None:
        if permanent or row.attempts >= max_attempts:
            log.warning("%s to %s failed for good: %s", row.action, row.channel, error)
            await self.store.finish_delivery(row.id, status="failed", error=error)
            return
        if retry_at is None:  # a row of its own: its own backoff, or what the provider asked for
            delay = retry_after if retry_after is not None else DELIVERY_RETRY.delay(row.attempts)
            retry_at = now() + delay
        else:  # a digest's row: the time set for the whole digest
            delay = retry_at - now()
        log.info(
            "%s to %s failed (attempt %d), retrying in %.0fs: %s",
            row.action,
            row.channel,
            row.attempts,
            delay,
            error,
        )
        await self.store.finish_delivery(
            row.id,
            status="queued",
            error=error,
            next_attempt_at=retry_at,
            silent=silent_channels(self.channels),  # settled meanwhile: the retry is dropped
        )
