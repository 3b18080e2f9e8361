"""Small tools every floor uses: signing and secret files (``signing``), the request-state key
(``state_key``), network facts (``net``), text made safe for a terminal (``terminal``), and loops
that survive a failed round (``loops``). It imports nothing of the project but ``core``."""
