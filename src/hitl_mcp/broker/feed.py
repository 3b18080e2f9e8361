"""Who hears the change feed (``Broker.listen``): every audit event of a request, written by any
process; and, for those that ask (``unattached``), the events of no request, such as a resume, which
moves every deadline."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Listener", "Listeners"]

Listener = Callable[[str, str], None]
"""``listener(request_id, event)``; ``request_id`` "" for an event of no request."""


class Listeners:
    def __init__(self) -> None:
        self._of_requests: set[Listener] = set()
        self._of_all: set[Listener] = set()

    def __len__(self) -> int:
        """How many listen (each listens to the requests; some to the events of none as well)."""
        return len(self._of_requests)

    def add(self, listener: Listener, *, unattached: bool = False) -> Callable[[], None]:
        """Returns the unsubscribe."""
        self._of_requests.add(listener)
        if unattached:
            self._of_all.add(listener)

        def unsubscribe() -> None:
            self._of_requests.discard(listener)
            self._of_all.discard(listener)

        return unsubscribe

    def heard(self, request_id: str | None, event: str) -> None:
        """An event of ``request_id`` (None: of no request)."""
        for listener in list(self._of_requests if request_id is not None else self._of_all):
            listener(request_id or "", event)
