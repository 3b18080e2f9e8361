"""One preview of each kind (``request_approval(preview=...)``), as the tests and the docs' pictures use
them, and a diff too long for any chat channel."""

from __future__ import annotations

from typing import Any

APP_OLD = '''import os


def connect():
    """Open the database."""
    url = os.environ["DATABASE_URL"]
    return Database(url, timeout=5)


def retries():
    return 3
'''
APP_NEW = '''import os


def connect():
    """Open the database, waiting longer for a slow primary."""
    url = os.environ["DATABASE_URL"]
    return Database(url, timeout=30, pool=4)


def retries():
    return 5
'''
README_OLD = "# Shop\n\nRun `make dev`.\n"
README_NEW = "# Shop\n\nRun `make dev`, then open http://localhost:8000.\n"

DIFF: dict[str, Any] = {
    "kind": "diff",
    "title": "Tune the database connection",
    "files": [
        {"path": "src/shop/db.py", "old": APP_OLD, "new": APP_NEW},
        {"path": "README.md", "old": README_OLD, "new": README_NEW},
    ],
}
COMMAND: dict[str, Any] = {"kind": "command", "command": "rm -rf build/ && make dist", "cwd": "/srv/shop"}
SQL: dict[str, Any] = {
    "kind": "sql",
    "statement": "delete from invoices where status = 'draft' and created_at < now() - interval '90 days'",
    "dialect": "postgres",
}
TABLE: dict[str, Any] = {
    "kind": "table",
    "title": "The 14 invoices to void",
    "columns": ["number", "customer", "issued", "amount", "currency"],
    "rows": [
        [
            f"INV-2026-{n:04d}",
            f"Customer {chr(65 + n % 26)} Ltd",
            f"2026-0{1 + n % 9}-1{n % 10}",
            120.5 * n,
            "EUR",
        ]
        for n in range(1, 15)
    ],
}
JSON: dict[str, Any] = {
    "kind": "json",
    "value": {"replicas": 4, "image": "shop:2.14.0", "env": {"LOG_LEVEL": "info"}, "canary": True},
}
MARKDOWN: dict[str, Any] = {
    "kind": "markdown",
    "title": "Reply to the customer",
    "text": "Hello Ana,\n\nYour refund of **EUR 120.50** was sent today.\n\n"
    "- Order: 4821\n- Bank: 2-3 days\n",
}
KINDS: dict[str, dict[str, Any]] = {
    "diff": DIFF,
    "command": COMMAND,
    "sql": SQL,
    "table": TABLE,
    "json": JSON,
    "markdown": MARKDOWN,
}


def long_diff(lines: int = 300) -> dict[str, Any]:
    """A file rewritten line by line: ``2 * lines`` changed lines, too long for any chat message."""
    old = "".join(f"value_{n} = {n}\n" for n in range(lines))
    new = "".join(f"value_{n} = {n * 2}\n" for n in range(lines))
    return {"kind": "diff", "files": [{"path": "settings.py", "old": old, "new": new}]}
