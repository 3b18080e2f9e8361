"""Signed tokens and the secret files their keys live in: the one place to audit.

``Signer(key, purpose)`` MACs (HMAC-SHA256) under one key and one purpose, so a MAC made for one
use is worth nothing for another. ``issue``/``read`` make and check dotted tokens: the fields, a
random nonce, and a 16-byte signature in URL-safe base64 (22 characters). Links to the inbox and
CSRF tokens use it.

``SecretFile(state_dir, name)`` is a key or token kept in the state directory, mode 0600. It is
written to a private temporary file first, then linked into place (not renamed): when two servers
start at once the first link wins, both read the same secret, and no reader ever sees a half-written
file. A file others can read is made private before it is used, and we say so.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("hitl_mcp")

_SIG = re.compile(r"[A-Za-z0-9_-]{22}")


def b64url(data: bytes) -> str:
    """URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def derive_key(secret: str | bytes, label: str) -> bytes:
    """A key for one use, derived from a longer-lived secret (the web token)."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(raw, label.encode(), hashlib.sha256).digest()


class Signer:
    """MACs under one key for one purpose. ``sep`` joins the purpose and the parts; it is part of
    the wire format of tokens already issued, so a user keeps the one it started with."""

    def __init__(self, key: bytes, purpose: str, sep: str = "\n") -> None:
        self._key = key
        self.purpose = purpose
        self.sep = sep

    def mac(self, *parts: str) -> bytes:
        material = self.sep.join((self.purpose, *parts)).encode()
        return hmac.new(self._key, material, hashlib.sha256).digest()

    def hexmac(self, *parts: str) -> str:
        return self.mac(*parts).hex()

    def check_hex(self, sent: str | None, *parts: str) -> bool:
        return bool(sent) and hmac.compare_digest(str(sent).encode(), self.hexmac(*parts).encode())

    def sign(self, payload: str) -> str:
        return b64url(self.mac(payload)[:16])

    def signed(self, payload: str, sig: str) -> bool:
        """Whether ``sig`` is :meth:`sign`'s signature of ``payload`` (compared in constant time)."""
        return hmac.compare_digest(self.sign(payload).encode(), sig.encode())

    def issue(self, *fields: str) -> str:
        """``field.field....nonce.signature``; fields must not contain dots (encode them with
        ``b64url`` first when they may)."""
        payload = ".".join((*fields, secrets.token_urlsafe(9)))
        return f"{payload}.{self.sign(payload)}"

    def read(self, token: str, fields: int) -> list[str] | None:
        """The fields of a token and its nonce last (``fields + 1`` values), or None when it is
        malformed or its signature is wrong."""
        payload, _, sig = token.rpartition(".")
        parts = payload.split(".")
        if len(parts) != fields + 1 or not _SIG.fullmatch(sig):
            return None
        if not hmac.compare_digest(self.sign(payload), sig):
            return None
        return parts


class SecretFileUnsafe(Exception):
    """A secret file is readable by others and cannot be made private."""


def _hex_key() -> str:
    return secrets.token_hex(32)


def _long_enough(text: str) -> bool:
    return len(text) >= 64


class SecretFile:
    """One secret in the state directory (mode 0600), made at first use."""

    def __init__(
        self,
        state_dir: Path,
        name: str,
        make: Callable[[], str] = _hex_key,
        usable: Callable[[str], bool] = _long_enough,
        holds: str = "its key",
    ) -> None:
        self.path = Path(state_dir) / name
        self.make = make
        self.usable = usable
        self.holds = holds
        """What whoever read the file has, for the warning when it was readable."""

    def read(self) -> str:
        """The secret as it is on disk (made private first), or "" when there is none."""
        try:
            self._private()
            return self.path.read_text().strip()
        except FileNotFoundError:
            return ""

    def get(self) -> str:
        """The secret: the one on disk when it is usable, else a new one, the same for every process
        that starts at the same time."""
        held = self.read()
        if self.usable(held):
            return held
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fresh = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.make() + "\n")
        try:
            if held:  # present but unusable: replace it
                os.replace(fresh, self.path)
            else:  # link, not rename: when two servers start at once, the first secret wins
                try:
                    os.link(fresh, self.path)
                except FileExistsError:
                    pass
        finally:
            fresh.unlink(missing_ok=True)
        return self.path.read_text().strip()

    def _private(self) -> None:
        mode = stat.S_IMODE(self.path.stat().st_mode)
        if not mode & 0o077:
            return
        try:
            os.chmod(self.path, 0o600)
        except OSError as exc:
            raise SecretFileUnsafe(
                f"{self.path} is readable by other users (mode {mode:04o}) and could not be made private "
                f"({exc.strerror or exc}); fix its mode (chmod 600) or delete it"
            ) from None
        log.warning(
            "hitl-mcp: %s was readable by other users (mode %04o); changed to 0600. "
            "Whoever read it meanwhile has %s: replace it if that may be so",
            self.path,
            mode,
            self.holds,
        )
