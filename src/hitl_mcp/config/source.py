"""YAML to plain data, with the line each key path was written on and which values came from ``${ENV}``.

This is the config's source: it reads, it does not validate (``models`` does, ``load`` joins the two).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from hitl_mcp.config.errors import ConfigError, KeyPath, _key_text, _show

#: a config file larger than this is refused
MAX_BYTES = 1024 * 1024
#: the most values (scalars, lists and mappings, counted after alias expansion) a config may hold
MAX_NODES = 100_000
#: the deepest nesting a config may have
MAX_DEPTH = 64


@dataclass
class _Doc:
    """Plain data from YAML, with where each key path was written and which values came from ${ENV}."""

    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    interpolated: set[KeyPath] = field(default_factory=set)
    #: every string produced by interpolation and every value taken from the environment
    secrets: set[str] = field(default_factory=set)

    def line(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest ancestor that was written in the file."""
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return None

    def known_prefix(self, path: KeyPath) -> KeyPath:
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return path[:n]
        return path


class _Loader(yaml.SafeLoader):
    """A safe loader whose aliases are shallow copies carrying the alias's own position.

    The copy shares its children with the anchored node, so composing stays linear; the position makes
    an error inside an aliased value point at the line where the alias was used.
    """

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            # types-PyYAML leaves Parser.peek_event unannotated (it returns the next Event)
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
            if node is None:  # an alias always composes to its anchored node; the stubs allow None
                return None
            clone = copy.copy(node)
            clone.start_mark, clone.end_mark = event.start_mark, event.end_mark
            return clone
        return super().compose_node(parent, index)


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_REF_START = re.compile(r"\$\$\{|\$\{")
_REF_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)


class _Builder:
    def __init__(self, loader: _Loader, env: Mapping[str, str], file: str | None) -> None:
        self.loader = loader
        self.env = env
        self.file = file
        self.doc = _Doc(data=None)
        self.count = 0
        self.active: set[int] = set()
        self.unset: list[ConfigError] = []
        """Each ``${NAME}`` whose variable is not set: all of them are reported together."""

    def error(self, message: str, node: yaml.Node | None, path: KeyPath) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else self.doc.line(path)
        return ConfigError(message, file=self.file, line=line, key=_key_text(path))

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise self.error(
                f"the document expands to more than {MAX_NODES} values; aliases (*name) that repeat "
                "large anchors are refused",
                node,
                path,
            )
        if len(path) > MAX_DEPTH:
            raise self.error(f"nested more than {MAX_DEPTH} levels deep", node, path)
        if not isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            return self.scalar(node, path)
        # an alias is a copy sharing the anchored node's list of children: that list identifies it
        key = id(node.value)
        if key in self.active:
            raise self.error("an alias refers to a value that contains it (a recursive alias)", node, path)
        self.active.add(key)
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path)
            return self.sequence(node, path)
        finally:
            self.active.discard(key)

    def mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        if node.tag != _MAP_TAG:
            raise self.error(f"unsupported tag {_show(node.tag)}", node, path)
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                raise self.error("merge keys (<<) are not supported; write the keys out", key_node, path)
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error("a key must be plain text, not a list or a mapping", key_node, path)
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in out:
                raise self.error(
                    f"duplicate key {_show(key)} (first given on line {first_line[key]})",
                    key_node,
                    (*path, key),
                )
            first_line[key] = line
            self.doc.lines[(*path, key)] = line
            out[key] = self.build(value_node, (*path, key))
        return out

    def sequence(self, node: yaml.SequenceNode, path: KeyPath) -> list[Any]:
        if node.tag != _SEQ_TAG:
            raise self.error(f"unsupported tag {_show(node.tag)}", node, path)
        out: list[Any] = []
        for i, item in enumerate(node.value):
            self.doc.lines[(*path, i)] = item.start_mark.line + 1
            out.append(self.build(item, (*path, i)))
        return out

    def scalar(self, node: yaml.Node, path: KeyPath) -> Any:
        try:
            value = self.loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as e:
            raise self.error(str(e.problem), node, path) from None
        if isinstance(value, str):
            value = self.interpolate(value, node, path)
        return value

    def interpolate(self, text: str, node: yaml.Node, path: KeyPath) -> str:
        if "${" not in text:
            return text
        out: list[str] = []
        pos = 0
        substituted = False
        for m in _REF_START.finditer(text):
            if m.start() < pos:
                continue
            out.append(text[pos : m.start()])
            if m.group() == "$${":
                out.append("${")
                pos = m.end()
                continue
            end = text.find("}", m.end())
            ref = _REF_BODY.fullmatch(text, m.end(), end) if end >= 0 else None
            if ref is None or (ref.group(2) is not None and "${" in ref.group(2)):
                raise self.error(
                    "a ${...} reference must be ${NAME} or ${NAME:-default} (write $${ for a literal ${)",
                    node,
                    path,
                )
            name, default = ref.group(1), ref.group(2)
            value = self.env.get(name)
            if value is None or (value == "" and default is not None):
                if default is None:
                    self.unset.append(
                        self.error(
                            f"environment variable {name} is not set "
                            f"(write ${{{name}:-default}} to give a default)",
                            node,
                            path,
                        )
                    )
                value = default or ""
            else:
                self.doc.secrets.add(value)
            out.append(value)
            substituted = True
            pos = end + 1
        out.append(text[pos:])
        result = "".join(out)
        if substituted:
            self.doc.interpolated.add(path)
            self.doc.secrets.add(result)
        return result


def _syntax_message(e: yaml.MarkedYAMLError, text: str, line: int | None) -> str:
    message = str(e.problem or e.context or "invalid YAML")
    if "'\\t'" in message:
        return "a tab character; YAML is indented with spaces, not tabs"
    if e.context and e.context_mark and e.problem_mark and e.context_mark.line != e.problem_mark.line:
        message += f" ({e.context} started on line {e.context_mark.line + 1})"
    source_line = text.splitlines()[line - 1] if line and line <= len(text.splitlines()) else ""
    if "${" in source_line and ("{" in message or "[" in message):
        message += '; inside {...} or [...], quote values that use ${...}: "${NAME}"'
    return message


def _read_yaml(text: str, file: str | None, env: Mapping[str, str], top_keys: Sequence[str]) -> _Doc:
    """The document in ``text``; a top level that is not a mapping names the valid ``top_keys``."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ConfigError(f"the file is larger than {MAX_BYTES // 1024 // 1024} MiB", file=file)
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark else None
            raise ConfigError(_syntax_message(e, text, line), file=file, line=line) from None
        except yaml.YAMLError as e:
            raise ConfigError(f"invalid YAML: {e}", file=file) from None
        except RecursionError:
            raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", file=file) from None
        builder = _Builder(loader, env, file)
        if root is None:
            builder.doc.data = {}
            return builder.doc
        if not isinstance(root, yaml.MappingNode):
            got = "a list" if isinstance(root, yaml.SequenceNode) else "a single value"
            raise ConfigError(
                f"the top level must be a mapping of keys ({', '.join(top_keys)}), got {got}",
                file=file,
                line=root.start_mark.line + 1,
            )
        builder.doc.lines[()] = root.start_mark.line + 1
        builder.doc.data = builder.build(root, ())
        if builder.unset:  # every one at once, before what their absence would break
            first, *rest = builder.unset
            first.more = rest
            raise first
        return builder.doc
    finally:
        loader.dispose()
