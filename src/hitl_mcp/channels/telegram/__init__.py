"""Telegram: a message with buttons from a bot; answered by a tap, or by replying to the message.

Answers come back by long polling (getUpdates: no public URL needed), or, with ``mode: webhook`` and
``server.public_url``, to ``/webhooks/<name>/update``, checked by the secret-token header. Each button's
``callback_data`` is a short token signed with a key derived from the bot token; a typed answer is a reply
to the message (its ``reply_to_message``). Only ``allowed_users`` may answer: by default the person of a
private chat, and in a group nobody until it is set.

python-telegram-bot (the ``[telegram]`` extra) is imported only when the channel runs, never by ``Config``.
"""

from hitl_mcp.channels.telegram.channel import TelegramChannel
from hitl_mcp.channels.telegram.config import INSTALL_HINT, Config

#: the name the channel loader looks for
Channel = TelegramChannel

__all__ = ["INSTALL_HINT", "Channel", "Config", "TelegramChannel"]
