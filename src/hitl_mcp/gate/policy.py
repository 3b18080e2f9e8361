"""The gate's policy file: which tool calls pass, which wait for a person, which are refused.

```yaml
default: ask                   # for calls no rule matches: allow | ask | deny (ask unless set)
unannotated: ask               # ... of a tool that gives no hints (ask; deny when default is deny)
read_only: allow               # ... of a tool with readOnlyHint: true (unless set: as default)
risk: medium                   # the default risk shown to the person
risk_metadata: follow          # an upstream's riskLevel / approvalRecommendation: follow | ignore
elicitation: allow             # the upstream's own forms, relayed to the host: allow | deny
sampling: ask                  # the upstream asking the host's model: allow | ask | deny
rules:                         # the first rule that matches decides
  - tools: ["read_*", "get_*"] # globs over the tool name
    action: allow
  - tools: ["*"]
    hints: {destructiveHint: true}  # the tool's annotations (hints.py: a missing one is MCP's default)
    action: ask
    approvals: {required: 2}   # a quorum, as request_approval takes it
  - tools: [run_command]
    when:                      # every condition must hold
      - {path: command, matches: "^rm\\b"}      # a JSON path into the arguments, a regex
      - {path: cwd, equals: /}                  # or an exact value
    action: deny
    reason: never from the root
  - tools: ["*"]
    action: ask
    risk: high
    to: [owner]                # people / escalation: passed through (see docs/proxy.md)
    description: "Run `{{ arguments.command }}` in {{ arguments.cwd }}"
  - tools: [run_query]
    action: ask
    preview: {kind: sql, argument: statement, dialect: postgres}   # what the person sees
```

Errors name the file, line and key, like the main config (``config/``).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hitl_mcp.config.errors import ConfigError
from hitl_mcp.config.source import MAX_BYTES, _read_yaml
from hitl_mcp.config.validation import convert as _convert
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.gate.hints import HintName, ToolHints, stricter
from hitl_mcp.gate.paths import lookup, split_path
from hitl_mcp.gate.previews import PreviewRule

Action = Literal["allow", "ask", "deny"]
RiskLevel = Literal["low", "medium", "high"]
TOP_KEYS = (
    "default",
    "unannotated",
    "read_only",
    "risk",
    "risk_metadata",
    "elicitation",
    "sampling",
    "channels",
    "timeout_seconds",
    "rules",
)
#: the longest description a template may render to (what the person reads; the payload is apart)
MAX_DESCRIPTION = 4000

_env = ImmutableSandboxedEnvironment(autoescape=False, undefined=jinja2.ChainableUndefined)


class Condition(BaseModel):
    """One test on the arguments: the value at ``path`` matches a regex, or equals a value."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, max_length=200)
    matches: str | None = None
    equals: Any = None

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not split_path(value):
            raise ValueError("a path such as command, options.mode or files[0]")
        return value

    @field_validator("matches")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression ({exc})") from None
        return value

    @model_validator(mode="after")
    def _one_test(self) -> Condition:
        if (self.matches is None) == ("equals" not in self.model_fields_set):
            raise ValueError("give one of matches (a regex) or equals (a value)")
        return self

    def holds(self, arguments: dict[str, Any]) -> bool:
        found, value = lookup(arguments, self.path)
        if not found:
            return False
        if self.matches is not None:
            text = value if isinstance(value, str) else _plain(value)
            return re.search(self.matches, text) is not None
        return bool(value == self.equals)


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[str] = Field(min_length=1)
    when: list[Condition] = Field(default_factory=list)
    hints: dict[HintName, bool] = Field(default_factory=dict)
    """Conditions on the tool's annotations; on a hook (no annotations known) they never hold."""
    action: Action
    risk: RiskLevel | None = None
    approvals: Quorum | None = None
    reason: str | None = Field(default=None, max_length=1000)
    description: str | None = Field(default=None, max_length=4000)
    channels: list[str] | None = None
    to: list[str] | None = None
    escalation: str | None = None
    timeout_seconds: float | None = Field(default=None, ge=1, le=30 * 86400)
    preview: PreviewRule | None = None
    """What the person sees of the call (``previews.py``): a kind and the argument that holds it."""

    @field_validator("tools", mode="before")
    @classmethod
    def _one_tool(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("description")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                _env.parse(value)
            except jinja2.TemplateSyntaxError as exc:
                raise ValueError(
                    f"not a valid template: {exc.message} (template line {exc.lineno})"
                ) from None
        return value

    def matches(self, tool: str, arguments: dict[str, Any], hints: ToolHints | None = None) -> bool:
        named = any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.tools)
        if not named or not all(condition.holds(arguments) for condition in self.when):
            return False
        if self.hints and hints is None:
            return False
        return all(hints is not None and hints.value(h) == want for h, want in self.hints.items())


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default: Action = "ask"
    unannotated: Action | None = None
    """For a tool that gives no hints and no rule matches; unset: ask (deny when ``default`` is deny)."""
    read_only: Action | None = None
    """For a tool with ``readOnlyHint: true`` that no rule matches; unset: ``default``."""
    risk: RiskLevel = "medium"
    risk_metadata: Literal["follow", "ignore"] = "follow"
    elicitation: Literal["allow", "deny"] = "allow"
    sampling: Action = "ask"
    channels: list[str] | None = None
    timeout_seconds: float | None = Field(default=None, ge=1, le=30 * 86400)
    rules: list[Rule] = Field(default_factory=list)
    source: Path | None = Field(default=None, exclude=True)

    def decide(self, tool: str, arguments: dict[str, Any], hints: ToolHints | None = None) -> Decision:
        """The decision for one call; ``hints``: the tool's annotations (None: unknown, as in a hook)."""
        for index, rule in enumerate(self.rules):
            if rule.matches(tool, arguments, hints):
                return self._proposed(
                    Decision(
                        action=rule.action,
                        risk=rule.risk or self.risk,
                        description=describe(rule.description, tool, arguments),
                        reason=rule.reason,
                        channels=rule.channels or self.channels,
                        to=rule.to,
                        escalation=rule.escalation,
                        timeout_seconds=rule.timeout_seconds or self.timeout_seconds,
                        approvals=rule.approvals,
                        rule=index,
                        preview=rule.preview,
                    ),
                    hints,
                )
        action, why = self.default, "no rule allows it"
        if hints is not None and hints.declared.get("readOnlyHint") is True and self.read_only is not None:
            action, why = self.read_only, "a read-only tool, and read_only is deny"
        elif hints is not None and not hints.annotated:
            action = self.unannotated or ("deny" if self.default == "deny" else "ask")
            why = "the tool gives no hints, and unannotated is deny" if self.unannotated else why
        return self._proposed(
            Decision(
                action=action,
                risk=self.risk,
                description=describe(None, tool, arguments),
                reason=why if action == "deny" else None,
                channels=self.channels,
                timeout_seconds=self.timeout_seconds,
            ),
            hints,
        )

    def _proposed(self, decision: Decision, hints: ToolHints | None) -> Decision:
        """The upstream's risk metadata read in: a higher risk, a quorum of two for "multi" (unless
        the policy names one); it never changes the action."""
        if hints is None or hints.proposal is None or self.risk_metadata == "ignore":
            return decision
        approvals = decision.approvals
        if approvals is None and hints.approval == "multi":
            approvals = Quorum(required=2, veto="any")
        return replace(
            decision,
            risk=cast(RiskLevel, stricter(decision.risk, hints.risk)),
            approvals=approvals,
            proposal=hints.proposal,
        )


@dataclass(frozen=True)
class Decision:
    action: Action
    risk: RiskLevel
    description: str
    reason: str | None = None
    channels: list[str] | None = None
    to: list[str] | None = None
    escalation: str | None = None
    timeout_seconds: float | None = None
    approvals: Quorum | None = None
    proposal: str | None = None
    """The upstream's risk metadata that was read in (shown to the person), if any."""
    rule: int | None = None
    """The index of the rule that decided; None: the default."""
    preview: PreviewRule | None = None


def describe(template: str | None, tool: str, arguments: dict[str, Any]) -> str:
    """What the person reads. A template is rendered sandboxed: it can read the arguments, never
    call into Python; one that fails at render time falls back to the plain wording (the payload,
    shown beside it, is what is approved either way)."""
    plain = f"Call the tool `{tool}`"
    if template is None:
        return plain
    try:
        text = _env.from_string(template).render(tool=tool, arguments=arguments).strip()
    except Exception:
        return plain
    return text[:MAX_DESCRIPTION] or plain


def _plain(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def parse_policy(text: str, source: str | None = None) -> Policy:
    doc = _read_yaml(text, source, {}, TOP_KEYS)
    try:
        policy = Policy.model_validate(doc.data)
    except ValidationError as exc:
        errors = _convert(exc, Policy, (), doc, source)
        errors.sort(key=lambda e: e.line or 0)  # each has one: the top-level mapping's at least
        first = errors[0]
        raise ConfigError(
            first.message, file=first.file, line=first.line, key=first.key, more=errors[1:]
        ) from None
    return policy


def load_policy(path: str | Path) -> Policy:
    shown = str(path)
    file = Path(path).expanduser()
    try:
        with file.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("no such policy file", file=shown) from None
    except OSError as exc:
        raise ConfigError(f"cannot be read: {exc.strerror or exc}", file=shown) from None
    if len(raw) > MAX_BYTES:  # before decoding: the cut may split a character or follow a BOM
        raise ConfigError(f"the file is larger than {MAX_BYTES // 1024 // 1024} MiB", file=shown)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "not valid UTF-8 text", file=shown, line=raw[: exc.start].count(b"\n") + 1
        ) from None
    policy = parse_policy(text, shown)
    policy.source = file.absolute()
    return policy


__all__ = ["Decision", "Policy", "Rule", "describe", "load_policy", "parse_policy"]
