"""Email: polling the mailbox over IMAP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
import time
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

import anyio

from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.core.models import now
from hitl_mcp.core.retry import RetryPolicy

if TYPE_CHECKING:
    from imapclient import IMAPClient

from hitl_mcp.channels.email.common import (
    _FETCH_CHUNK,
    _HEADER_FIELDS,
    _MAX_PER_POLL,
    _Batch,
    _looks_ours,
    _Mark,
    _tls_context,
)
from hitl_mcp.channels.email.config import Config, log


class _Imap(BaseChannel):
    """The email channel's way in: IMAP polling in a worker thread, IDLE only to wake early."""

    config: Config
    # set by EmailChannel.__init__
    _client: IMAPClient | None
    _stop: threading.Event

    if TYPE_CHECKING:  # _Smtp's and EmailChannel's

        def _scrub(self, text: str) -> str: ...

        async def _handle(self, uid: int, validity: int, raw: bytes) -> None: ...

    # --- IMAP --------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.imap is None or self._background:
            return
        # one poller among the processes sharing the store (replicas): two would race for the mail
        self.in_background(self._imap_work, exclusive=True)

    async def _imap_work(self) -> None:
        self._stop.clear()
        try:
            await self._poll_forever()
        finally:
            self._stop.set()
            self._drop_client()  # wakes a worker thread blocked in IDLE

    async def close(self) -> None:
        await self.stop_background()

    def _imap_error(self, exc: BaseException) -> str:
        cfg = self.config.imap
        assert cfg is not None
        where = f"IMAP {cfg.host}:{cfg.port_number}"
        from imapclient.exceptions import LoginError

        if isinstance(exc, LoginError):
            return self._scrub(
                f"{where} refused the login for {cfg.username!r} ({exc}): "
                "check imap.username and imap.password"
            )
        if isinstance(exc, ssl.SSLError):
            return f"{where}: TLS failed ({getattr(exc, 'verify_message', None) or exc})"
        return self._scrub(f"{where}: {type(exc).__name__}: {exc}")

    def _imap_open(self) -> IMAPClient:
        from imapclient import IMAPClient

        cfg = self.config.imap
        assert cfg is not None
        context = _tls_context(cfg.ca_file)
        client = IMAPClient(
            cfg.host,
            port=cfg.port_number,
            ssl=cfg.security == "tls",
            ssl_context=context,
            timeout=cfg.timeout,
        )
        try:
            if cfg.security == "starttls":
                client.starttls(context)
            client.login(cfg.username, cfg.password.get_secret_value())
        except BaseException:
            with contextlib.suppress(Exception):
                client.shutdown()
            raise
        return client

    def _imap_check(self) -> int:
        client = self._imap_open()
        try:
            assert self.config.imap is not None
            info = client.select_folder(self.config.imap.folder, readonly=True)
            return int(info.get(b"EXISTS", 0))
        finally:
            with contextlib.suppress(Exception):
                client.logout()

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.shutdown()  # also wakes a worker thread blocked in IDLE

    async def _poll_forever(self) -> None:
        cfg = self.config.imap
        assert cfg is not None
        failures = 0
        while not self._stop.is_set():
            try:
                if self._client is None:
                    self._client = await anyio.to_thread.run_sync(self._imap_open, abandon_on_cancel=True)
                    if failures:
                        log.warning("email %s: IMAP connection restored", self.name)
                await self.poll()
                failures = 0
                await self._wait_for_mail()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._drop_client()
                failures += 1
                policy = RetryPolicy(initial_interval=cfg.poll_interval, maximum_interval=300.0)
                delay = policy.delay(failures)
                log.warning("email %s: %s; reconnecting in %.1fs", self.name, self._imap_error(exc), delay)
                await anyio.sleep(delay)

    async def _wait_for_mail(self) -> None:
        """Until the next poll: IDLE where the server has it (any news wakes us early), else a sleep."""
        cfg = self.config.imap
        client = self._client
        assert cfg is not None
        if client is None:
            raise ConnectionError("the IMAP connection was closed")
        if b"IDLE" not in client.capabilities():
            await anyio.sleep(cfg.poll_interval)
            return
        # IDLE is re-issued well within the 29 minutes servers allow (RFC 2177)
        seconds = min(cfg.poll_interval, 25 * 60)
        await anyio.to_thread.run_sync(self._idle, client, seconds, abandon_on_cancel=True)

    def _idle(self, client: IMAPClient, seconds: float) -> None:
        client.idle()
        try:
            deadline = time.monotonic() + seconds
            while not self._stop.is_set():
                step = min(deadline - time.monotonic(), 1.0)
                if step <= 0:
                    break
                started = time.monotonic()
                # news, or back early with nothing (the connection closed): either way, go and poll
                if client.idle_check(timeout=step) or time.monotonic() - started < step / 2:
                    break
        finally:
            if not self._stop.is_set():
                client.idle_done()

    async def poll(self) -> None:
        """One pass over the folder: new mail since the high-water mark, each processed once."""
        cfg = self.config.imap
        client = self._client
        assert cfg is not None
        if client is None:
            raise ConnectionError("the IMAP connection was closed")
        state_key = f"imap:{cfg.folder}"
        raw = await self.state.get(state_key)
        mark = _Mark(**json.loads(raw)) if raw else None
        # where to look when the mark does not fit the folder (the first look, or a rebuilt mailbox):
        # from a day before the oldest open request, or before now
        oldest = min([now(), *(r.created_at for r, _ in await self.open_requests())])
        since = datetime.fromtimestamp(oldest, UTC).date() - timedelta(days=1)
        batch = await anyio.to_thread.run_sync(self._fetch_new, client, mark, since, abandon_on_cancel=True)
        for uid, message in batch.mails:
            try:
                await self._handle(uid, batch.validity, message)
            except Exception:
                log.exception("email %s: could not process mail uid %d", self.name, uid)
        if mark is None or (batch.validity, batch.last_uid) != (mark.validity, mark.uid):
            value = json.dumps({"validity": batch.validity, "uid": batch.last_uid})
            await self.state.set(state_key, value)

    def _fetch_new(self, client: IMAPClient, mark: _Mark | None, since: date) -> _Batch:
        """In the worker thread: select the folder read-only, find new mail, fetch what is ours."""
        cfg = self.config.imap
        assert cfg is not None
        info = client.select_folder(cfg.folder, readonly=True)
        validity = int(info[b"UIDVALIDITY"])
        if mark is not None and mark.validity == validity:
            floor = mark.uid
            uids = client.search(["UID", f"{floor + 1}:*"])
        else:  # the first look, or the mailbox was rebuilt: recent mail (seen Message-IDs are skipped)
            floor = 0
            uids = client.search(["SINCE", since])
        new = sorted(u for u in uids if u > floor)[:_MAX_PER_POLL]
        if not new:
            return _Batch(validity, floor, [])
        ours: list[int] = []
        for i in range(0, len(new), _FETCH_CHUNK):
            chunk = new[i : i + _FETCH_CHUNK]
            fetched = client.fetch(chunk, [f"BODY.PEEK[HEADER.FIELDS ({_HEADER_FIELDS})]"])
            for uid in chunk:
                headers = next((v for k, v in fetched.get(uid, {}).items() if k.startswith(b"BODY[")), b"")
                if _looks_ours(headers):
                    ours.append(uid)
        mails: list[tuple[int, bytes]] = []
        for i in range(0, len(ours), _FETCH_CHUNK):
            chunk = ours[i : i + _FETCH_CHUNK]
            fetched = client.fetch(chunk, ["BODY.PEEK[]"])
            mails += [(uid, fetched[uid][b"BODY[]"]) for uid in chunk if uid in fetched]
        return _Batch(validity, new[-1], mails)
