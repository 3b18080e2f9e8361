"""The errors of the request protocol: what ``Hub.resolve`` and the broker raise.

They sit apart from the broker so that channels (which must not import the broker) can catch them;
``hitl_mcp.broker`` re-exports them, so ``from hitl_mcp.broker import NotFound`` keeps working.
"""

from __future__ import annotations


class BrokerError(Exception):
    """A request the broker refuses; the message says why and what would be valid."""


class UnknownChannel(BrokerError):
    pass


class NotFound(BrokerError):
    pass


class ReplyInvalid(BrokerError):
    """The reply does not fit the request (a choice not offered, a decision on a question...)."""
