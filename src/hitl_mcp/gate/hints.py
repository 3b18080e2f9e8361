"""What an upstream says about its tools, read for the policy: the MCP tool annotations
(``readOnlyHint``, ``destructiveHint``, ``idempotentHint``, ``openWorldHint``), and the risk metadata
of the tool risk proposal (SEP-2793, not yet part of MCP: ``riskLevel``, ``approvalRecommendation``).

A hint the tool does not give reads as MCP's default for it (``readOnlyHint`` false,
``destructiveHint`` true, ``idempotentHint`` false, ``openWorldHint`` true), except that a tool that
says it is read-only is neither destructive nor anything but idempotent unless it says so. A tool
that gives none of the four is *unannotated*. A hook (``hook.py``) knows no annotations at all:
there ``ToolHints`` is None, and no hint condition holds.

Hints are the upstream's word about itself: the policy reads them, and the risk metadata can only
make an approval stricter (a higher risk, a quorum), never let a call through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

HintName = Literal["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]
HINTS: tuple[HintName, ...] = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
#: MCP's defaults for a hint a tool does not give (ToolAnnotations in the specification)
SPEC_DEFAULTS: dict[HintName, bool] = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
#: the proposal's riskLevel, read into hitl-mcp's three risks ("critical" is our "high")
RISK_LEVELS = {"low": "low", "medium": "medium", "high": "high", "critical": "high"}
APPROVALS = ("none", "single", "multi")


@dataclass(frozen=True)
class ToolHints:
    """One tool's annotations as the upstream listed them."""

    declared: dict[HintName, bool] = field(default_factory=dict)
    """The hints the tool gives, by their MCP names."""
    risk_level: str | None = None
    """``riskLevel`` from the proposal, as given (low, medium, high, critical)."""
    approval: str | None = None
    """``approvalRecommendation`` from the proposal (none, single, multi)."""

    @property
    def annotated(self) -> bool:
        return bool(self.declared)

    def value(self, hint: HintName) -> bool:
        """The hint's value: given, else MCP's default (a read-only tool is not destructive)."""
        if hint in self.declared:
            return self.declared[hint]
        if self.declared.get("readOnlyHint") is True and hint in ("destructiveHint", "idempotentHint"):
            return hint == "idempotentHint"
        return SPEC_DEFAULTS[hint]

    @property
    def risk(self) -> str | None:
        """hitl-mcp's risk for the proposal's ``riskLevel``, if it gave a known one."""
        return RISK_LEVELS.get(self.risk_level or "")

    @property
    def proposal(self) -> str | None:
        """The risk metadata, as the person is shown it; None when the upstream sent none."""
        parts = []
        if self.risk_level is not None:
            parts.append(f"riskLevel {self.risk_level}")
        if self.approval is not None:
            parts.append(f"approvalRecommendation {self.approval}")
        return ", ".join(parts) or None


def hints_of(tool: dict[str, Any]) -> ToolHints:
    """A listed tool's hints, from its raw JSON (the proposal's fields are not in the SDK's model)."""
    annotations = tool.get("annotations")
    if not isinstance(annotations, dict):
        return ToolHints()
    declared: dict[HintName, bool] = {
        h: annotations[h] for h in HINTS if isinstance(annotations.get(h), bool)
    }
    risk = annotations.get("riskLevel")
    approval = annotations.get("approvalRecommendation")
    return ToolHints(
        declared=declared,
        risk_level=risk if isinstance(risk, str) and risk in RISK_LEVELS else None,
        approval=approval if isinstance(approval, str) and approval in APPROVALS else None,
    )


def stricter(risk: str, proposed: str | None) -> str:
    """The higher of two risks (the proposal may raise the policy's, never lower it)."""
    order = ["low", "medium", "high"]
    if proposed is None or proposed not in order:
        return risk
    return max(risk, proposed, key=order.index)


__all__ = ["HINTS", "SPEC_DEFAULTS", "HintName", "ToolHints", "hints_of", "stricter"]
