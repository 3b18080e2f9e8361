"""Slack: a Block Kit message with buttons; answered by a button, a typed answer or a thread reply.

Answers come back over Socket Mode when ``app_token`` is set (no public URL needed), else as signed
HTTP requests to ``/webhooks/slack/interactivity`` and ``/webhooks/slack/events`` (``signing_secret``).
Every message carries the request id in its ``block_id``s, and the delivery ref is ``CHANNEL:TS``, so a
click or a thread reply finds its request. Only ``allowed_users`` may answer: by default the ``users``
a direct message went to, and for a channel nobody until it is set.

``slack_sdk`` (the ``[slack]`` extra) is imported only when the channel is used, never by ``Config``.
"""

from hitl_mcp.channels.slack.blocks import outcome_line, render
from hitl_mcp.channels.slack.channel import SlackChannel
from hitl_mcp.channels.slack.config import INSTALL_HINT, Config

#: the name the channel loader looks for
Channel = SlackChannel

__all__ = ["INSTALL_HINT", "Channel", "Config", "SlackChannel", "outcome_line", "render"]
