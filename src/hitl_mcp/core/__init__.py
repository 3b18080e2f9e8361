"""The vocabulary and the rules of the game, with no I/O: requests, replies and outcomes
(``models``), quorums, what an answer may be (``outcomes``), the result a model reads (``results``)
and the words for an outcome (``wording``), remembered rules, delegation, escalation ladders and
routing (``escalation``, ``ladders``), the audit chain and its replay, who calls (``principal``),
durations and retry policies, and the store's protocol (``store``, ``records``).

It imports nothing else of the project, and none of anyio, mcp, starlette, sqlite3, asyncpg or httpx
(``tests/docs/test_house.py`` checks).
"""
