"""The routing policy a config makes: its people, ladders, delegations and per-tool (and per-risk)
choices, as the broker's ``core.escalation.Policy``."""

from __future__ import annotations

from hitl_mcp.config.models import Config
from hitl_mcp.core.escalation import Choice, Policy
from hitl_mcp.core.models import Kind


def policy_from_config(config: Config) -> Policy:
    """The people, ladders and per-tool (and per-risk) choices of a config."""
    d = config.defaults
    choices: dict[Kind | tuple[Kind, str], Choice] = {
        Kind.QUESTION: Choice(d.ask_user.escalation, d.ask_user.to),
        Kind.APPROVAL: Choice(
            d.request_approval.escalation, d.request_approval.to, d.request_approval.approvals
        ),
        Kind.NOTIFICATION: Choice("none", d.notify_user.to),
    }
    for risk, choice in d.request_approval.risk.items():
        choices[(Kind.APPROVAL, risk)] = Choice(choice.escalation, choice.to, choice.approvals)
    return Policy(
        delegations=config.delegations,
        people=config.people,
        ladders=config.escalation,
        types={name: block.type for name, block in config.channels.items()},
        choices=choices,
        step_up=frozenset(d.request_approval.step_up),
    )
