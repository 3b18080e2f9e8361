"""Config errors: ``FILE:LINE: KEY: MESSAGE``, and pydantic's ``ValidationError`` said in those words.

Values that came from the environment and values of secret fields never appear in a message.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Secret, SecretBytes, SecretStr, ValidationError

if TYPE_CHECKING:
    from hitl_mcp.config.source import _Doc

KeyPath = tuple[str | int, ...]


class ConfigError(Exception):
    """A config problem: ``str(e)`` is ``"FILE:LINE: KEY: MESSAGE"``, leaving out the parts not known.

    ``more`` holds the other problems found in the same pass (this one is the first in file order),
    so a ``check`` command can list them all.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
        more: Iterable[ConfigError] = (),
    ) -> None:
        self.file = file
        self.line = line
        self.key = key
        self.message = message
        self.more: list[ConfigError] = list(more)
        super().__init__(str(self))

    def __str__(self) -> str:
        parts: list[str] = []
        if self.file is not None and self.line is not None:
            parts.append(f"{self.file}:{self.line}")
        elif self.file is not None:
            parts.append(self.file)
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.key:
            parts.append(self.key)
        parts.append(self.message)
        return ": ".join(parts)


def _key_text(path: KeyPath) -> str | None:
    """``("channels", "ops-slack", "allowed_users", 0)`` -> ``channels.ops-slack.allowed_users[0]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{_show(part)}]"
    return out or None


def _show(value: str, limit: int = 40) -> str:
    """A string for an error message: quoted, truncated."""
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return repr(value)


def _describe(value: Any, sensitive: bool) -> str:
    """What the user wrote, for ``got ...``: a type only when the value must not be shown."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return "a number" if sensitive else repr(value)
    if isinstance(value, str):
        return "a string" if sensitive else _show(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


_PLAIN_MESSAGES = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "finite_number": "expected a finite number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "path_type": "expected a path",
}
#: error types whose message is complete without "got <the value>"
_NO_GOT = {"missing", "extra_forbidden", "value_error", "assertion_error", "store_unsupported"}


def _unwrap(annotation: Any) -> list[Any]:
    """The member types of an annotation: Annotated and Optional/Union peeled off."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for a in typing.get_args(annotation) for t in _unwrap(a) if t is not type(None)]
    return [annotation]


def _is_secret_type(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, SecretStr | SecretBytes | Secret)


def _contains_secret(annotation: Any, seen: set[int] | None = None) -> bool:
    seen = set() if seen is None else seen
    if id(annotation) in seen:
        return False
    seen.add(id(annotation))
    for member in _unwrap(annotation):
        if _is_secret_type(member):
            return True
        if isinstance(member, type) and issubclass(member, BaseModel):
            if any(_contains_secret(f.annotation, seen) for f in member.model_fields.values()):
                return True
        elif any(_contains_secret(a, seen) for a in typing.get_args(member)):
            return True
    return False


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    for name, f in model.model_fields.items():
        if (f.alias or name) == key or name == key:
            return f.annotation
    return None


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, bool]:
    """The annotation at ``loc`` under ``model`` (as far as it can be followed), and whether a
    secret type was passed on the way."""
    current: Any = model
    secret = False
    for part in loc:
        members = _unwrap(current)
        secret = secret or any(_is_secret_type(m) for m in members)
        nxt = None
        for m in members:
            if isinstance(m, type) and issubclass(m, BaseModel) and isinstance(part, str):
                nxt = _field_by_key(m, part)
            elif typing.get_origin(m) is dict and len(typing.get_args(m)) == 2:
                nxt = typing.get_args(m)[1]
            elif typing.get_origin(m) in (list, tuple, set, frozenset) and typing.get_args(m):
                nxt = typing.get_args(m)[0]
            if nxt is not None:
                break
        if nxt is None:
            return current, secret
        current = nxt
    return current, secret


def _yaml_keys(model: type[BaseModel]) -> list[str]:
    # a channel that takes no digest (the inbox) does not offer the key it would refuse
    hidden = set() if getattr(model, "takes_digest", True) else {"digest"}
    return [f.alias or name for name, f in model.model_fields.items() if not f.exclude and name not in hidden]


def _scrub(message: str, doc: _Doc, extra: Any = None) -> str:
    hide = set(doc.secrets)
    if isinstance(extra, str):
        hide.add(extra)
    for value in sorted(hide, key=len, reverse=True):
        if len(value) >= 4:
            message = message.replace(value, "***")
    return message


def _convert(
    exc: ValidationError, model: type[BaseModel], prefix: KeyPath, doc: _Doc, file: str | None
) -> list[ConfigError]:
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = (*prefix, *loc)
        kind = err["type"]
        ctx = err.get("ctx") or {}
        annotation, secret_on_path = _annotation_at(model, loc)
        sensitive = (
            secret_on_path or _contains_secret(annotation) or doc.known_prefix(path) in doc.interpolated
        )
        shown = path if kind == "missing" else doc.known_prefix(path)

        if kind == "missing":
            message = "a required key is missing"
        elif kind == "extra_forbidden":
            parent, _ = _annotation_at(model, loc[:-1])
            models = [m for m in _unwrap(parent) if isinstance(m, type) and issubclass(m, BaseModel)]
            message = f"unknown key {_show(str(loc[-1]))}"
            if models:
                message += f"; valid keys: {', '.join(_yaml_keys(models[0]))}"
        elif kind in _PLAIN_MESSAGES:
            message = _PLAIN_MESSAGES[kind]
        elif kind == "literal_error":
            message = f"expected {ctx.get('expected')}"
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            words = {
                "greater_than_equal": ("at least", "ge"),
                "greater_than": ("more than", "gt"),
                "less_than_equal": ("at most", "le"),
                "less_than": ("less than", "lt"),
            }[kind]
            message = f"must be {words[0]} {ctx.get(words[1])}"
        elif kind == "too_short":
            n = ctx.get("min_length")
            message = f"must have at least {n} item{'s' if n != 1 else ''}"
        elif kind == "string_too_short":
            n = ctx.get("min_length")
            message = "must not be empty" if n == 1 else f"must be at least {n} characters long"
        else:
            message = str(err["msg"])
            if message.startswith("Value error, "):
                message = message[len("Value error, ") :]
            message = message[:1].lower() + message[1:]
        if kind not in _NO_GOT:
            message += f", got {_describe(err.get('input'), sensitive)}"
        message = _scrub(message, doc, err.get("input") if sensitive else None)
        out.append(ConfigError(message, file=file, line=doc.line(shown), key=_key_text(shown)))
    return out
