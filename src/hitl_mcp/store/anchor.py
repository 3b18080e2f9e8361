"""The audit chain's head, kept outside the database: ``audit.anchor``, and optionally syslog or a URL.

Whoever can write the database can rewrite the audit log and recompute every hash after the row
they changed, or drop the newest rows: the chain alone still verifies. So each time a request
settles, the process that settled it appends its chain's head (its seq and hash) to a file beside
the database, one line ``<unix time> <seq> <hash>`` for chain 0 (SQLite's, and PostgreSQL's rows from
before each process had a chain of its own), ``<unix time> <chain>:<seq> <hash>`` for chain k > 0
(core/audit.py), opened ``O_APPEND`` (mode 0600), and, if configured, sends the same line to syslog
or POSTs it to a URL. ``hitl-mcp audit verify`` then checks every anchored (chain, seq, hash)
against that chain: a hash that differs means rows up to that seq were rewritten; an anchored seq
beyond the chain's last row means its newest rows were dropped. Each chain is checked on its own.

Several processes share one database (a server and a CLI answering beside it, replicas): each
appends after its own commit, so lines may arrive slightly out of order; each line is checked on its
own, and each chain's highest anchored seq is the one it must reach. Adding lines can only raise an
alarm, never hide a change. What the anchors prove, and what they do not, is in
docs/security-audit.md.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hitl_mcp.core.audit import label
from hitl_mcp.core.models import iso

log = logging.getLogger("hitl_mcp")

ANCHOR_FILE = "audit.anchor"
#: how long one POST of an anchor may take; a settle never waits for it
POST_TIMEOUT = 5.0
#: anchors waiting for syslog or the URL; beyond this they are dropped (the file has them all)
QUEUE_MAX = 1000
_STOP = None


@dataclass(frozen=True)
class Anchor:
    at: float
    seq: int
    hash: str
    line: int
    """Where it was read: its line number in the anchor file."""
    chain: int = 0

    def text(self) -> str:
        return anchor_line(self.at, self.seq, self.hash, self.chain).strip()


def anchor_line(at: float, seq: int, digest: str, chain: int = 0) -> str:
    return f"{at:.3f} {label(chain, seq)} {digest}\n"


def _row(field: str) -> tuple[int, int]:
    """``seq`` (chain 0) or ``chain:seq``, as (chain, seq)."""
    chain, _, seq = field.rpartition(":")
    return (int(chain) if chain else 0), int(seq)


def read_anchors(lines: Iterable[str]) -> tuple[list[Anchor], list[str]]:
    """The anchors in ``lines``, and one problem per line that is not one. Only the last three
    fields of a line count, so lines copied out of syslog (with its prefix) read as well; a seq
    without a chain is chain 0's."""
    anchors: list[Anchor] = []
    problems: list[str] = []
    for number, raw in enumerate(lines, 1):
        fields = raw.split()
        if not fields:
            continue
        try:
            at, (chain, seq), digest = float(fields[-3]), _row(fields[-2]), fields[-1]
            int(digest, 16)
            ok = seq >= 1 and chain >= 0 and len(digest) == 64
        except (ValueError, IndexError):
            ok = False
        if not ok:
            problems.append(
                f"anchor line {number} is not '<unix time> [<chain>:]<seq> <sha256>': {raw.strip()[:100]!r}"
            )
            continue
        anchors.append(Anchor(at, seq, digest.lower(), number, chain))
    return anchors, problems


def check_anchors(anchors: Iterable[Anchor], hashes: Mapping[tuple[int, int], str]) -> list[str]:
    """One line per way the chains (``hashes``: (chain, seq) -> hash) depart from the anchors, chain
    by chain: the newest rows dropped, and rows rewritten (even with every hash after them
    recomputed)."""
    by_chain: dict[int, list[Anchor]] = {}
    for anchor in anchors:
        by_chain.setdefault(anchor.chain, []).append(anchor)
    chains: dict[int, dict[int, str]] = {}
    for (chain, seq), digest in hashes.items():
        chains.setdefault(chain, {})[seq] = digest
    problems: list[str] = []
    for chain in sorted(by_chain):
        problems += _check_chain(chain, by_chain[chain], chains.get(chain, {}))
    return problems


def _check_chain(chain: int, anchors: list[Anchor], hashes: Mapping[int, str]) -> list[str]:
    """``check_anchors`` for one chain (``hashes``: its seq -> hash)."""
    ordered = sorted(anchors, key=lambda a: (a.seq, a.line))
    head = max(hashes, default=0)
    problems: list[str] = []
    on = f" of chain {chain}" if chain else ""
    if ordered and ordered[-1].seq > head:
        newest = max(ordered, key=lambda a: a.seq)
        dropped = f"{label(chain, head + 1)}..{newest.seq}"
        problems.append(
            f"audit log TRUNCATED: row {label(chain, newest.seq)} was anchored at {iso(newest.at)} (anchor "
            f"line {newest.line}) but the database ends{on} at row {head}: rows {dropped} were dropped"
        )
    intact = 0  # the highest anchored row that still matches: rows up to it are as they were
    for anchor in ordered:
        if anchor.seq > head:
            break
        if hashes.get(anchor.seq) == anchor.hash:
            intact = anchor.seq
            continue
        problems.append(
            f"audit log REWRITTEN: row {label(chain, anchor.seq)} no longer has the hash anchored at "
            f"{iso(anchor.at)} (anchor line {anchor.line}): a row in "
            f"{label(chain, intact + 1)}..{anchor.seq} was changed since"
        )
        break
    return problems


def last_line(path: Path) -> str | None:
    """The anchor file's last line, read from its end; None when there is none."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            lines = fh.read().decode(errors="replace").split("\n")
    except FileNotFoundError:
        return None
    return next((line for line in reversed(lines) if line.strip()), None)


class Anchorer:
    """Appends the head after each settle: to the anchor file at once (no fsync), and to syslog and
    a URL from a thread of its own, so a slow or failing receiver never holds up a settle."""

    def __init__(
        self, path: Path, *, syslog: bool | str = False, url: str | None = None, source: str = ""
    ) -> None:
        self.path = path
        self.syslog = syslog
        self.url = url
        self.source = source or str(path.parent)
        self._queue: queue.Queue[tuple[float, int, str, int] | None] = queue.Queue(QUEUE_MAX)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._file_failing = False

    @property
    def remote(self) -> bool:
        return bool(self.syslog or self.url)

    def __call__(self, seq: int, digest: str, chain: int = 0) -> None:
        at = time.time()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, anchor_line(at, seq, digest, chain).encode())
            finally:
                os.close(fd)
            self._file_failing = False
        except OSError as exc:
            if not self._file_failing:
                log.warning("hitl-mcp: cannot append to the audit anchor %s: %s", self.path, exc.strerror)
            self._file_failing = True
        if self.remote:
            self._start()
            try:
                self._queue.put_nowait((at, seq, digest, chain))
            except queue.Full:
                row = label(chain, seq)
                log.warning("hitl-mcp: audit anchor for row %s not sent: %d waiting already", row, QUEUE_MAX)

    def close(self, timeout: float = POST_TIMEOUT) -> None:
        """Send what is waiting (for at most ``timeout`` seconds), then stop the sender."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        thread.join(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_loop, name="audit-anchor", daemon=True)
                self._thread.start()

    def _send_loop(self) -> None:
        syslog: _Syslog | None = None
        failing: set[str] = set()
        while (item := self._queue.get()) is not _STOP:
            at, seq, digest, chain = item
            text = anchor_line(at, seq, digest, chain).strip()
            if self.syslog:
                try:
                    syslog = syslog or _Syslog(self.syslog)
                    syslog.send(f"audit anchor {text}")
                    failing.discard("syslog")
                except Exception as exc:  # this thread outlives any one receiver's failure
                    if syslog is not None:
                        syslog.close()
                    syslog = None
                    _warn_once(failing, "syslog", f"to syslog: {getattr(exc, 'strerror', None) or exc}")
            if self.url:
                body = {"at": at, "seq": seq, "hash": digest, "line": text, "source": self.source}
                if chain:
                    body["chain"] = chain
                try:
                    _post(self.url, body)
                    failing.discard("url")
                except Exception as exc:  # never the URL itself in a log line: it may hold a secret
                    reason = getattr(exc, "reason", None) or type(exc).__name__
                    if getattr(exc, "code", None):  # an HTTPError: the receiver answered, but not 2xx
                        reason = f"HTTP {exc.code} {reason}"  # type: ignore[attr-defined]
                    _warn_once(failing, "url", f"to server.audit_anchor.url: {reason}")
        if syslog is not None:
            syslog.close()


def _warn_once(failing: set[str], key: str, what: str) -> None:
    if key not in failing:
        log.warning("hitl-mcp: audit anchor not sent %s (the anchor file still has it)", what)
        failing.add(key)


class _Syslog:
    """One datagram per anchor to syslog (facility auth, severity notice): ``true`` is the local
    socket, a path another local socket, ``host:port`` a UDP receiver."""

    PRIORITY = 4 * 8 + 5  # LOG_AUTH, LOG_NOTICE

    def __init__(self, target: bool | str) -> None:
        if target is True:
            path = next((p for p in ("/dev/log", "/var/run/syslog") if os.path.exists(p)), "/dev/log")
            self.sock = self._unix(path)
        elif isinstance(target, str) and not target.startswith("/"):
            host, _, port = target.rpartition(":")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self.sock = socket.socket(family, socket.SOCK_DGRAM)
            self.sock.connect((host.strip("[]"), int(port)))
        else:
            self.sock = self._unix(str(target))

    @staticmethod
    def _unix(path: str) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock

    def send(self, text: str) -> None:
        self.sock.send(f"<{self.PRIORITY}>hitl-mcp[{os.getpid()}]: {text}".encode())

    def close(self) -> None:
        self.sock.close()


def _post(url: str, body: dict[str, object]) -> None:
    import urllib.request  # here: most processes never post

    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "hitl-mcp audit anchor"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=POST_TIMEOUT) as response:
        response.read()


def configured_anchor(state_dir: Path, *, syslog: bool | str = False, url: str | None = None) -> Anchorer:
    """The anchor of the database in ``state_dir``, with ``server.audit_anchor``'s receivers."""
    return Anchorer(
        state_dir / ANCHOR_FILE,
        syslog=syslog,
        url=url,
        source=f"{socket.gethostname()}:{state_dir}",
    )
