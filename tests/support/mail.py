"""Real mail servers for the email tests: aiosmtpd (STARTTLS + AUTH) in the test's own event loop, and
pymap (an IMAP server with STARTTLS and IDLE) as a subprocess. Certificates come from ``trustme``.

Nothing here sleeps to synchronise: the SMTP server fires its ``changes`` for every mail it accepts, and pymap
is started through its own ``notify_ready`` hook, which prints a line once it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import anyio
import trustme
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.support.events import Changes, until

SMTP_USER = "hitl@example.com"
SMTP_PASSWORD = "smtp-pass-9f8e7d"
IMAP_USER = "hitl@example.com"
IMAP_PASSWORD = "imap-pass-1a2b3c"

_PYMAP_LAUNCHER = """
import sys
import pymap.main as m
m.notify_ready = lambda: print("READY", flush=True)
sys.argv[0] = "pymap"
m.main()
"""


@dataclass(frozen=True)
class Certs:
    """A test CA (``ca_file`` for clients) and a server certificate for 127.0.0.1 and localhost."""

    ca: trustme.CA
    ca_file: Path
    server_pem: Path  # key and chain in one file

    @classmethod
    def make(cls, directory: Path) -> Certs:
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        ca_file = directory / "ca.pem"
        server_pem = directory / "server.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        server.private_key_and_cert_chain_pem.write_to_path(str(server_pem))
        return cls(ca, ca_file, server_pem)

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.server_pem))
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


# ------------------------------------------------------------------------------------------- SMTP


class SmtpServer:
    """aiosmtpd on 127.0.0.1 in the running event loop: STARTTLS required, AUTH required (after TLS).

    ``messages`` holds every accepted mail, parsed; ``wait_for`` awaits the next ones; ``changes``
    fires at each."""

    def __init__(self, certs: Certs, username: str = SMTP_USER, password: str = SMTP_PASSWORD) -> None:
        self.certs = certs
        self.username = username
        self.password = password
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str | None, list[str]]] = []
        self.logins: list[tuple[str, bool]] = []
        self.changes = Changes()
        self._server: asyncio.Server | None = None
        self.port = 0

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == self.username
            and auth_data.password.decode() == self.password
        )
        self.logins.append((auth_data.login.decode() if isinstance(auth_data, LoginPassword) else "?", ok))
        # handled=False makes aiosmtpd answer 535; the default (True) sends nothing and the client hangs
        return AuthResult(success=ok, handled=False)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or envelope.content
        assert isinstance(content, bytes)
        msg = BytesParser(policy=policy.default).parsebytes(content)
        assert isinstance(msg, EmailMessage)
        self.messages.append(msg)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        self.changes.fire()
        return "250 OK"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        context = self.certs.server_context()

        def factory() -> SMTP:
            return SMTP(
                self,
                hostname="mail.test",
                tls_context=context,
                require_starttls=True,
                auth_required=True,
                auth_require_tls=True,
                authenticator=self._authenticate,
                loop=loop,
            )

        self._server = await loop.create_server(factory, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def wait_for(
        self, count: int = 1, where: Callable[[EmailMessage], bool] = lambda m: True
    ) -> list[EmailMessage]:
        """The first ``count`` (at least one) mails accepted so far that match ``where``, waiting (up to
        15s) for them."""

        def found() -> list[EmailMessage] | None:
            matching = [m for m in self.messages if where(m)]
            return matching[:count] if len(matching) >= count else None

        return await until(found, self.changes, seconds=15)


@contextlib.asynccontextmanager
async def smtp_server(certs: Certs, **kwargs: Any) -> AsyncIterator[SmtpServer]:
    server = SmtpServer(certs, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A TCP port that accepts connections and never says a word (an SMTP server that hangs)."""
    held: list[anyio.abc.SocketStream] = []

    async def hold(stream: anyio.abc.SocketStream) -> None:
        held.append(stream)
        await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, hold)
        yield listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.cancel_scope.cancel()


# ------------------------------------------------------------------------------------------- IMAP


class ImapServer:
    """pymap's in-memory ("dict") backend in a subprocess, with STARTTLS and one preloaded user.

    The mailbox lives in the process: ``restart`` gives an empty one with a new UIDVALIDITY."""

    def __init__(
        self, certs: Certs, port: int, workdir: Path, user: str = IMAP_USER, password: str = IMAP_PASSWORD
    ) -> None:
        self.certs = certs
        self.port = port
        self.user = user
        self.password = password
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        self._client: Any = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        errors = open(self.workdir / "pymap.stderr", "ab")  # closed below, once Popen has it
        pem = str(self.certs.server_pem)
        # a subprocess, not in-process: pymap then runs as deployed, and a kill drops every connection
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-c", _PYMAP_LAUNCHER),
                *("--host", "127.0.0.1", "--port", str(self.port), "--cert", pem, "--key", pem),
                *("--no-service", "admin", "--no-service", "managesieve"),
                *("dict", "--demo-user", self.user, "--demo-password", self.password),
            ],
            stdout=subprocess.PIPE,
            stderr=errors,
            env={
                **{k: v for k, v in os.environ.items() if k not in ("CERT_FILE", "KEY_FILE")},
                "FQDN": "imap.test",
            },
        )
        errors.close()
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # pymap's notify_ready: it listens from here on
        if line.strip() != b"READY":
            self.stop()
            raise RuntimeError(f"pymap did not start: {(self.workdir / 'pymap.stderr').read_text()[-2000:]}")

    def stop(self, kill: bool = False) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.shutdown()
        process, self.process = self.process, None
        if process is None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def restart(self) -> None:
        """Kill the server (dropping every connection at once) and start a fresh one on the same port."""
        self.stop(kill=True)
        self.start()

    def client(self) -> Any:
        from imapclient import IMAPClient

        client = IMAPClient("127.0.0.1", port=self.port, ssl=False, timeout=10)
        client.starttls(self.certs.client_context())
        client.login(self.user, self.password)
        return client

    def _with_client(self, work: Callable[[Any], Any]) -> Any:
        """Run ``work`` on one kept connection (a pymap login costs a few hundred ms); reconnect once."""
        from imapclient.exceptions import IMAPClientAbortError

        with self._lock:
            for attempt in (1, 2):
                if self._client is None:
                    self._client = self.client()
                try:
                    return work(self._client)
                except (IMAPClientAbortError, OSError):
                    self._client = None
                    if attempt == 2:
                        raise
            return None

    def create_folder(self, name: str) -> None:
        self._with_client(lambda c: c.create_folder(name))

    def append(self, folder: str, message: EmailMessage | bytes) -> None:
        """Deliver a mail into a folder, as the mail server would."""
        raw = message if isinstance(message, bytes) else message.as_bytes(policy=policy.SMTP)
        self._with_client(lambda c: c.append(folder, raw))

    def flags(self, folder: str) -> list[tuple[Any, ...]]:
        def work(client: Any) -> list[tuple[Any, ...]]:
            client.select_folder(folder, readonly=True)
            fetched = client.fetch(client.search(["ALL"]), ["FLAGS"])
            return [fetched[uid][b"FLAGS"] for uid in sorted(fetched)]

        result: list[tuple[Any, ...]] = self._with_client(work)
        return result

    async def aappend(self, folder: str, message: EmailMessage | bytes) -> None:
        await anyio.to_thread.run_sync(self.append, folder, message)
