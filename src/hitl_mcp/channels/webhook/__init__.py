"""Signed webhook: every request, notification and outcome POSTed as a Standard Webhooks event; answers
come back as signed POSTs to ``/webhooks/<name>/reply``. How people wire hitl-mcp into n8n, Zapier,
PagerDuty or a bot of their own (docs/channels/webhook.md).

Both ways are signed with the channel's one ``whsec_`` secret (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``). An answer more than 5 minutes off the server's clock is refused, and so is a
second one with the same ``webhook-id``. ``standardwebhooks`` (the ``[webhook]`` extra) is imported
only when the channel is used, never by ``Config``.
"""

from hitl_mcp.channels.webhook.channel import WebhookChannel
from hitl_mcp.channels.webhook.config import INSTALL_HINT, Config

#: the name the channel loader looks for
Channel = WebhookChannel

__all__ = ["INSTALL_HINT", "Channel", "Config", "WebhookChannel"]
