"""SMS through Twilio: a short text with a reply code out, the person's text back in.

Out: one text per recipient (``to``), carrying a four-digit reference code that is unique among the
requests still pending on this channel (and not reused soon after one closes), e.g.
``[hitl] Deploy v2 to prod? Reply YES 4821 or NO 4821, optionally with a comment.`` Segments (GSM-7
or UCS-2) are counted and kept in the delivery's detail, with the code and the numbers reached.

In: a signed webhook (``POST /webhooks/twilio/sms``, checked with twilio's ``RequestValidator`` against
``server.public_url`` plus the route's path), or polling ``messages.list(to=<from>,
date_sent_after=<mark>)`` with the mark kept in the store. Either way each ``MessageSid`` is handled
once. Only ``allowed_numbers`` (default: ``to``) may answer; STOP/START/HELP are honoured.

Sends are never repeated blindly: twilio's own ``max_retries`` is not used (it re-POSTs on any 5xx).
A 429 (20429, "never processed") is retried through the outbox; a 5xx, a timeout or a send cut short
leaves the outcome unknown, which is recorded as such instead of texting the person twice.

twilio is imported lazily: validating a config must not need it.
"""

from hitl_mcp.channels.twilio_sms.channel import TwilioSmsChannel
from hitl_mcp.channels.twilio_sms.config import EMPTY_TWIML, MAX_CHARS, POLL_OVERLAP, TWILIO_API, Config
from hitl_mcp.channels.twilio_sms.text import Segments, _parse, compose, instructions, segments

#: the name the channel loader looks for
Channel = TwilioSmsChannel

__all__ = [
    "EMPTY_TWIML",
    "MAX_CHARS",
    "POLL_OVERLAP",
    "TWILIO_API",
    "Channel",
    "Config",
    "Segments",
    "TwilioSmsChannel",
    "_parse",
    "compose",
    "instructions",
    "segments",
]
