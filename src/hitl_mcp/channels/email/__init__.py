"""Email: a mail per recipient out through SMTP; the answer comes back by reply (IMAP) or by a link.

**Out.** One multipart mail (plain text and HTML) per address in ``to``, so that each carries its own
reply token and its own links. Subject ``[hitl #1a2b3c4d] Deploy v2 to prod?``; our own Message-ID;
``Auto-Submitted: auto-generated``.

**Reply tokens.** Each mail's Reply-To is a plus address, ``<local>+hitl.<request id>.<token>@<domain>``
of ``reply_to`` (default: ``from``), and its Message-ID is ``<hitl.<request id>.<token>@<domain>>``,
which replies repeat in In-Reply-To and References. So the token comes back even through a client that
drops the Reply-To, and with ``plus_addressing: false`` (for providers without plus addresses) the
Message-ID alone carries it. The token is an HMAC of the request id and the recipient's address under a
key kept in the state directory (mode 0600): a reply must come from an allowed sender, and for an
approval it must also carry the token made for that very sender, so a forged From alone is not enough.

**In.** IMAP polling (IMAPClient in a worker thread; never the GPL aioimaplib) of one folder, read-only
and with ``BODY.PEEK``: new mail is found by UID above a high-water mark kept with the folder's
UIDVALIDITY in the channel state, headers first, the body only for mail that carries one of our tokens,
a Message-ID of ours or a ``[hitl #id]`` subject; every Message-ID is also remembered
(``first_seen``), so nothing is processed twice across reconnects, restarts or a rebuilt mailbox.
IDLE, where the server has it, only wakes the poller early: polling is the guarantee, and any IDLE
trouble just means a reconnect and a poll. Auto-replies are never answers. The first line decides
(see :mod:`hitl_mcp.channels.email.replies`). The sender gets a short confirmation; a reply to a
settled request gets one "already answered" mail per sender, and only one.

**Links** (only when ``server.public_url`` is set): one per answer, signed (HMAC over request id,
recipient, answer, expiry and a nonce), bound to the request and the recipient, expiring (``link_ttl``,
default the request's lifetime) and single-use. ``GET /webhooks/<name>/link/<token>`` only shows a
confirmation page, because scanners fetch links; the page's POST records the answer.

**Retract.** Off by default; with ``follow_up: true`` the recipients get a short "answered by X via Y"
mail in the thread when the request is settled (the one who answered by mail got a confirmation).

The package: ``config`` (the YAML block), ``compose`` (tokens and mails), ``smtp`` (out), ``imap``
(in), ``replies`` (reading an answer out of a mail: no I/O), ``links`` (answer links and their page),
``common`` (what those share) and ``channel`` (:class:`EmailChannel`, which puts them together).
"""

from hitl_mcp.channels.email.channel import EmailChannel
from hitl_mcp.channels.email.common import LINK_PATH, Link, load_key
from hitl_mcp.channels.email.config import Config, ImapConfig, SmtpConfig

#: the name the channel loader looks for
Channel = EmailChannel

__all__ = ["LINK_PATH", "Channel", "Config", "EmailChannel", "ImapConfig", "Link", "SmtpConfig", "load_key"]
