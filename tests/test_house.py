"""The house rule of issue 14: one idea per module, and no module in src/ over 400 lines, except the
store engines, which each hold one idea (the SQL of one engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "hitl_mcp"
ENGINES = {SRC / "store" / "sqlite.py", SRC / "store" / "postgres.py"}
LIMIT = 400

pytestmark = pytest.mark.docs


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if path not in ENGINES and (lines := len(path.read_text().splitlines())) > LIMIT
    }
    assert long == {}, f"split these along their seams (docs/development.md): {long}"
