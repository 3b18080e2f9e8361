"""Pushover: page someone until they look. A paging step, not a place to answer.

Out: a message to a user or group key, by default at emergency priority: Pushover repeats it every
``retry`` seconds until it is acknowledged or ``expire`` passes; it links to the request in the inbox.
Once the request settles, anywhere, the page is cancelled (``receipts/<r>/cancel``). An
acknowledgement is recorded as ``seen`` (who, on which device), never as an answer: the person answers
in the inbox or on another channel. Receipts are read every ``poll_seconds``; with a public URL,
Pushover's callback is taken too (its receipt is read back before anything is recorded). Plain httpx2.

Use it as a rung of an escalation ladder (``notify: [pager]``): it cannot take an answer itself.
"""

from hitl_mcp.channels.pushover.channel import PushoverChannel
from hitl_mcp.channels.pushover.config import Config

#: the name the channel loader looks for
Channel = PushoverChannel

__all__ = ["Channel", "Config", "PushoverChannel"]
