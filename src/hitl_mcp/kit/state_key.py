"""The key that seals 2026-07-28 round-trip state (``request_state``): the same on every replica.

A host answering our form in its own window retries the tool call with the sealed state we gave it;
behind a balancer that retry may land on another replica, which must open it. So the key comes from,
in this order:

1. ``server.request_state_key`` in the config (``${ENV}`` interpolation works there);
2. ``$HITL_REQUEST_STATE_KEY``;
3. else ``request-state.key`` in the state directory (mode 0600), made at first use: fine for one
   server, or for processes sharing one state directory.

A key is 64 or more hexadecimal characters (``openssl rand -hex 32``; the key file's content is one).
Several, separated by commas, make a rotation ring: the first seals, every one opens (``new,old``
for as long as a request may live, then ``new``). The key is a secret: no error or log line shows it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, SecretStr
from pydantic_core import PydanticCustomError

__all__ = ["ENV", "STATE_KEY_FILE", "BadStateKey", "StateKey", "check_keys", "request_state_keys"]

#: the request-state key's file in the state directory
STATE_KEY_FILE = "request-state.key"
ENV = "HITL_REQUEST_STATE_KEY"
_HEX = re.compile(r"[0-9a-f]+")
MIN_LENGTH = 64


class BadStateKey(ValueError):
    """A configured key that cannot be used; the message names what is wrong, never the key."""


def check_keys(text: str) -> list[bytes]:
    """The key ring in ``text``, or ``BadStateKey`` saying what is wrong with it."""
    parts = [part.strip().lower() for part in text.split(",")]
    for i, part in enumerate(parts):
        which = f"key {i + 1} of {len(parts)}: " if len(parts) > 1 else ""
        if not _HEX.fullmatch(part):
            raise BadStateKey(
                f"{which}expected hexadecimal characters only (0-9, a-f), such as the output of "
                "`openssl rand -hex 32`" + (" (an empty entry between commas?)" if not part else "")
            )
        if len(part) < MIN_LENGTH:
            raise BadStateKey(
                f"{which}too short ({len(part)} characters): expected at least {MIN_LENGTH} hexadecimal "
                "characters (`openssl rand -hex 32`)"
            )
    if len(set(parts)) != len(parts):
        raise BadStateKey("the same key is listed twice")
    return [part.encode() for part in parts]


def _valid(value: Any) -> Any:
    """``server.request_state_key`` in the config: checked, with an error that never shows it."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        try:
            check_keys(value)
        except BadStateKey as exc:
            raise PydanticCustomError("request_state_key", str(exc)) from None
    return value


#: the config's type for it (``config.models.ServerConfig.request_state_key``)
StateKey = Annotated[SecretStr | None, BeforeValidator(_valid)]


def request_state_keys(
    state_dir: Path, configured: str | None = None, env: Mapping[str, str] | None = None
) -> list[bytes]:
    """The key ring: ``configured`` (``server.request_state_key``), else ``$HITL_REQUEST_STATE_KEY``,
    else the key file in ``state_dir``. Raises ``BadStateKey`` (naming where it came from)."""
    env = os.environ if env is None else env
    for text, where in ((configured, "server.request_state_key"), (env.get(ENV), f"${ENV}")):
        if text:
            try:
                return check_keys(text)
            except BadStateKey as exc:
                raise BadStateKey(f"{where}: {exc}") from None
    from hitl_mcp.kit.signing import SecretFile

    secret = SecretFile(state_dir, STATE_KEY_FILE, holds="the key to round-trip state")
    return [secret.get().encode()]
