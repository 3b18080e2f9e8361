"""The service: ask, resolve, wait, expire and escalate, routing, standing answers (rules and the
pause), the outbox and digests. The only writer of outcomes.

``broker.py`` is the broker; ``routing.py`` who a request goes to; ``rules.py`` the answers that
stand without anyone being asked (remembered rules, the pause); ``views.py`` what the faces read;
``outbox.py`` deliveries with leases and retries; ``digests.py`` notifications held for a digest.

``from hitl_mcp.broker import Broker`` (and the names below) is the public path.
"""

from hitl_mcp.broker.broker import (
    AskDefaults,
    AskSpec,
    Broker,
    BrokerError,
    NotFound,
    ReplyInvalid,
    UnknownChannel,
    check_reply,
    expiry_outcome,
)

__all__ = [
    "AskDefaults",
    "AskSpec",
    "Broker",
    "BrokerError",
    "NotFound",
    "ReplyInvalid",
    "UnknownChannel",
    "check_reply",
    "expiry_outcome",
]
