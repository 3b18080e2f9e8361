"""ntfy: a push notification with answer buttons, on ntfy.sh or your own server; no public URL needed.

Out: a JSON publish to the server's root (title, message, tags, priority), with up to three ``http``
action buttons (Approve/Deny, or the choices), each carrying a token signed for one request and one
answer (HMAC, a key in the state directory; single use; it expires with the request). The
notification's sequence id is the request id, so once the request is settled it is replaced by the
outcome (ntfy 2.16+; an older server shows the update as a follow-up).

In: without ``server.public_url``, the buttons POST to the reply topic (``<topic>-replies``), which the
server follows as a JSON stream from the last message it handled (``since``, kept in the store),
reconnecting with backoff. With a public URL, they POST to ``/webhooks/<name>/answer`` instead. A
token that is forged, expired, used before or does not fit is audited and changes nothing.

ntfy has no identity: whoever can read the topic can press a button, so the topic is a password, and
only the question or action itself is sent unless ``show_payload`` says otherwise. It uses httpx2, a
dependency of the core.
"""

from hitl_mcp.channels.ntfy.channel import NtfyChannel
from hitl_mcp.channels.ntfy.config import DEFAULT_SERVER, Config, Priorities

#: the name the channel loader looks for
Channel = NtfyChannel

__all__ = ["DEFAULT_SERVER", "Channel", "Config", "NtfyChannel", "Priorities"]
