"""pydantic's ``ValidationError`` said for a person: each error at its file, line and key, with what
would be valid, and never a value that is secret or came from the environment."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, Secret, SecretBytes, SecretStr, ValidationError

from hitl_mcp.config.errors import ConfigError, KeyPath, _key_text, _show
from hitl_mcp.config.source import _Doc


def describe(value: Any, sensitive: bool) -> str:
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


PLAIN_MESSAGES = {
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
NO_GOT = {"missing", "extra_forbidden", "value_error", "assertion_error", "store_unsupported"}


def unwrap(annotation: Any) -> list[Any]:
    """The member types of an annotation: Annotated and Optional/Union peeled off."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return unwrap(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for a in typing.get_args(annotation) for t in unwrap(a) if t is not type(None)]
    return [annotation]


def is_secret_type(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, SecretStr | SecretBytes | Secret)


def contains_secret(annotation: Any, seen: set[int] | None = None) -> bool:
    seen = set() if seen is None else seen
    if id(annotation) in seen:
        return False
    seen.add(id(annotation))
    for member in unwrap(annotation):
        if is_secret_type(member):
            return True
        if isinstance(member, type) and issubclass(member, BaseModel):
            if any(contains_secret(f.annotation, seen) for f in member.model_fields.values()):
                return True
        elif any(contains_secret(a, seen) for a in typing.get_args(member)):
            return True
    return False


def field_by_key(model: type[BaseModel], key: str) -> Any:
    for name, f in model.model_fields.items():
        if (f.alias or name) == key or name == key:
            return f.annotation
    return None


def annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, bool]:
    """The annotation at ``loc`` under ``model`` (as far as it can be followed), and whether a
    secret type was passed on the way."""
    current: Any = model
    secret = False
    for part in loc:
        members = unwrap(current)
        secret = secret or any(is_secret_type(m) for m in members)
        nxt = None
        for m in members:
            if isinstance(m, type) and issubclass(m, BaseModel) and isinstance(part, str):
                nxt = field_by_key(m, part)
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


def yaml_keys(model: type[BaseModel]) -> list[str]:
    # a channel that takes no digest (the inbox) does not offer the key it would refuse
    hidden = set() if getattr(model, "takes_digest", True) else {"digest"}
    return [f.alias or name for name, f in model.model_fields.items() if not f.exclude and name not in hidden]


def scrub(message: str, doc: _Doc, extra: Any = None) -> str:
    hide = set(doc.secrets)
    if isinstance(extra, str):
        hide.add(extra)
    for value in sorted(hide, key=len, reverse=True):
        if len(value) >= 4:
            message = message.replace(value, "***")
    return message


def convert(
    exc: ValidationError, model: type[BaseModel], prefix: KeyPath, doc: _Doc, file: str | None
) -> list[ConfigError]:
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = (*prefix, *loc)
        kind = err["type"]
        ctx = err.get("ctx") or {}
        annotation, secret_on_path = annotation_at(model, loc)
        sensitive = (
            secret_on_path or contains_secret(annotation) or doc.known_prefix(path) in doc.interpolated
        )
        shown = path if kind == "missing" else doc.known_prefix(path)

        if kind == "missing":
            message = "a required key is missing"
        elif kind == "extra_forbidden":
            parent, _ = annotation_at(model, loc[:-1])
            models = [m for m in unwrap(parent) if isinstance(m, type) and issubclass(m, BaseModel)]
            message = f"unknown key {_show(str(loc[-1]))}"
            if models:
                message += f"; valid keys: {', '.join(yaml_keys(models[0]))}"
        elif kind in PLAIN_MESSAGES:
            message = PLAIN_MESSAGES[kind]
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
        if kind not in NO_GOT:
            message += f", got {describe(err.get('input'), sensitive)}"
        message = scrub(message, doc, err.get("input") if sensitive else None)
        out.append(ConfigError(message, file=file, line=doc.line(shown), key=_key_text(shown)))
    return out
