"""The one Starlette app: JSON API, inbox pages, live events, webhook routes and, over HTTP, MCP itself.

``app.py`` builds the app (routes, middleware, the error handler); ``deps.py`` is what endpoints
share on ``app.state.web`` and ``requires``, the auth they declare; ``errors.py`` the ``Problem`` they
raise. ``api.py`` is the JSON API and ``replies.py`` the JSON a reply answers with (the API's and the
forms' alike); ``pages.py`` the server-rendered inbox (Jinja2 templates and the static shell under
``templates/`` and ``static/``); ``pwa.py`` the manifest and service worker; ``events.py`` the
``/events`` stream that keeps a page live; ``views.py`` the pure helpers the pages use; ``pagekit.py``
the templates, headers and form reading every page shares; ``auth.py`` the web token; ``sessions.py``
inbox sessions and their CSRF tokens (the sign-in form's too); ``signin.py`` ``/login`` and URL-mode
links; ``throttle.py`` the limit on wrong tokens; ``rebinding.py`` the Host and Origin checks on
loopback; ``limits.py`` and ``deadline.py`` bounds on bodies and on slow request headers;
``credentials.py`` who may use ``/mcp``, and ``oauth/`` OAuth 2.1 for it (the resource metadata, an
external provider's tokens, the built-in authorization server and its consent page).
"""

#: how the inbox names the operator (the web token) as a responder and an actor; people are named
#: by their own names (web/people.py)
WEB_RESPONDER = "operator"

#: the longest value each reply field may have, in characters (the JSON API and the forms alike)
REPLY_FIELDS = {"text": 8000, "choice": 200, "decision": 10, "comment": 4000}
#: the largest reply body accepted, in bytes
MAX_BODY = 64 * 1024
