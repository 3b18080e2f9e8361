"""Who a request goes to: the channels a call names or the defaults pick, checked against what each
channel can do, the people (``to``) and their escalation ladder, and the delegations active now."""

from __future__ import annotations

from hitl_mcp.channels.base import Channel
from hitl_mcp.core import delegation
from hitl_mcp.core.asks import AskDefaults, AskSpec
from hitl_mcp.core.errors import UnknownChannel
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.ladders import LadderConfig
from hitl_mcp.core.models import Kind, now
from hitl_mcp.core.store import Store

__all__ = ["BrokerRouting"]


class BrokerRouting:
    """The broker's routing, on its ``channels``, ``defaults``, ``policy`` and ``store``."""

    channels: dict[str, Channel]
    defaults: AskDefaults
    policy: Policy
    store: Store

    def check_channels(self, kind: Kind, names: list[str] | None, risk: str | None = None) -> list[str]:
        chosen = list(dict.fromkeys(names)) if names else list(self.defaults.channels[kind])
        unknown = [n for n in chosen if n not in self.channels]
        if unknown:
            valid = ", ".join(sorted(self.channels)) or "(none)"
            raise UnknownChannel(
                f"unknown channel {', '.join(map(repr, unknown))}; configured channels: {valid}"
            )
        if kind != Kind.NOTIFICATION:
            silent = [n for n in chosen if not self.channels[n].answerable]
            if silent:
                raise UnknownChannel(
                    f"channel {', '.join(map(repr, silent))} can notify but cannot take an answer"
                )
        if kind == Kind.APPROVAL and not any(self.channels[n].may_approve(risk) for n in chosen):
            raise UnknownChannel(
                f"none of {', '.join(map(repr, chosen))} may approve a {risk or 'medium'}-risk action "
                "(the host's form is limited by its `approvals` setting); add a channel a person answers, "
                "such as web"
            )
        return chosen

    def route(self, spec: AskSpec, policy: Policy | None = None) -> tuple[list[str], LadderConfig | None]:
        """The channels asked at once (the call's ``channels`` and ``to``, else the defaults') and the
        escalation ladder that follows (``escalation.Policy.route``)."""
        names, ladder = (policy or self.policy).route(
            spec.kind, spec.risk, spec.channels, spec.to, self.defaults.channels
        )
        if not spec.forms:
            names = self.without_forms(names or list(self.defaults.channels[spec.kind]))
        return self.check_channels(spec.kind, names, spec.risk), ladder

    def without_forms(self, names: list[str]) -> list[str]:
        """``names`` but the host's forms; UnknownChannel when nothing is left."""
        kept = [n for n in names if not getattr(self.channels.get(n), "is_form", False)]
        if names and not kept:
            raise UnknownChannel(
                f"{', '.join(map(repr, names))} is only the host's form, which the gate never asks: it "
                "forwards only what a person approved on a person channel; name one, such as web"
            )
        return kept

    async def policy_now(self) -> Policy:
        """The policy with the delegations active now: the config's and the run-time ones (stored)."""
        if not self.policy.people:
            return self.policy
        return self.policy.at(now(), await delegation.stored(self.store))
