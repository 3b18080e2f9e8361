"""Web Push: the inbox itself notifies a phone or a desktop, with no app and no account.

A person signed in to the inbox (or the operator) turns notifications on with the bell button; the
browser's push subscription is kept with them (``devices.py``). A request asked of them is pushed to
each of their devices (RFC 8030, encrypted for the browser by RFC 8291, signed with the server's VAPID
key by RFC 8292), with Approve and Deny where an approval may be given here (no step-up, a preview
shown whole), else Open. A tap posts a single-use token from the inbox's service worker; the answer
counts as the person's. Once the request settles, the notification is replaced by the outcome (the
same tag); cancelled, it is withdrawn. Needs ``pip install 'mcp-hitl[webpush]'`` (pywebpush, py-vapid),
imported only when it pushes.
"""

from hitl_mcp.channels.webpush.channel import WebPushChannel
from hitl_mcp.channels.webpush.config import Config

#: the name the channel loader looks for
Channel = WebPushChannel

__all__ = ["Channel", "Config", "WebPushChannel"]
