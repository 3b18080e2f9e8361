"""The house rule of issue 14: one idea per module, and no module in src/ over 400 lines, except the
store engines, which each hold one idea (the SQL of one engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


# --- the layout: imports point down ------------------------------------------------------------

#: what each floor may import of the project, besides itself and ``hitl_mcp`` (the version). Read top
#: to bottom: cli -> gate -> serving -> runtime -> {mcp, web} -> {broker, config} -> {channels, store}
#: -> {core, kit}. Faces never import each other; core imports nothing of the project; client (beside
#: the house) imports no other floor, and no floor imports it.
BELOW: dict[str, set[str]] = {
    "core": set(),
    # a client for programs that are not MCP hosts: it speaks MCP to a server, and stands on no floor
    "client": set(),
    "kit": {"core"},
    "channels": {"core", "kit"},
    "store": {"core", "kit"},
    "config": {"core", "kit", "channels"},
    "broker": {"core", "kit", "channels"},
    "mcp": {"core", "kit", "channels", "store", "broker", "config"},
    "web": {"core", "kit", "channels", "store", "broker", "config"},
    "runtime": {"core", "kit", "channels", "store", "broker", "config", "mcp", "web"},
    "serving": {"core", "kit", "channels", "store", "broker", "config", "mcp", "web", "runtime"},
    "gate": {"core", "kit", "channels", "store", "broker", "config", "mcp", "web", "runtime", "serving"},
    "cli": {
        "core",
        "kit",
        "channels",
        "store",
        "broker",
        "config",
        "mcp",
        "web",
        "runtime",
        "serving",
        "gate",
    },
    "__main__": {"cli"},
}
#: libraries the core may not import: it does no I/O and speaks no protocol
NOT_IN_CORE = {"anyio", "mcp", "starlette", "sqlite3", "aiosqlite", "asyncpg", "httpx", "httpx2", "uvicorn"}


def _floor(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports() -> list[tuple[str, str, int, str]]:
    """(module, file, line, imported module) for every import of the package and of a library, those
    inside functions and under ``TYPE_CHECKING`` included: a type-only import ties two ideas too."""
    import ast

    found = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                if node.module == "hitl_mcp":
                    names = [f"hitl_mcp.{a.name}" for a in node.names if a.name != "__version__"]
                found += [(module, str(path.relative_to(ROOT)), node.lineno, name) for name in names]
            elif isinstance(node, ast.Import):
                found += [(module, str(path.relative_to(ROOT)), node.lineno, a.name) for a in node.names]
    return found


def test_imports_point_down() -> None:
    wrong = []
    for module, file, line, imported in _imports():
        if not imported.startswith("hitl_mcp."):
            continue
        mine, theirs = _floor(module), _floor(imported)
        if theirs != mine and theirs not in BELOW.get(mine, set()):
            wrong.append(f"{file}:{line}: {mine} imports {imported}")
    assert wrong == [], "\n".join(wrong)


def test_the_core_does_no_io_and_speaks_no_protocol() -> None:
    wrong = [
        f"{file}:{line}: {imported}"
        for module, file, line, imported in _imports()
        if _floor(module) == "core" and imported.split(".")[0] in NOT_IN_CORE
    ]
    assert wrong == [], "\n".join(wrong)


def test_every_module_is_in_a_floor_and_the_top_level_is_small() -> None:
    top = sorted(
        p.name
        for p in SRC.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__init__.py"
    )
    floors = {p.removesuffix(".py") for p in top}
    assert floors <= set(BELOW), f"not in a floor of tests/docs/test_house.py: {floors - set(BELOW)}"
    assert len(top) <= 16, top


def test_module_names_written_as_strings_exist() -> None:
    """Module paths the code names as strings (the side work loaded after a stdio start, the hosts'
    hook formats, the entry points) move with the code: each still imports."""
    import importlib
    import tomllib

    from hitl_mcp.gate.hook import MODULES
    from hitl_mcp.serving import SIDE_MODULES

    names = list(SIDE_MODULES) + [f"hitl_mcp.gate.hooks.{m}" for m in MODULES.values()]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr))
    for name in names:
        importlib.import_module(name)


def _edges() -> dict[str, set[str]]:
    """module -> the modules of the package it imports: ``from a.b import c`` is an import of ``a.b.c``
    when that is a module, else of ``a.b``."""
    import ast

    paths = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    targets.append(name if name in paths else node.module)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[module] |= {t for t in targets if t in paths and t != module}
    return graph


def test_no_import_circles() -> None:
    """No two modules import each other, directly or round a circle (lazy and type-only imports
    count): a circle means an idea lives in the wrong module."""
    graph = _edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert circles == [], circles
