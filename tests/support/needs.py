"""Markers by what a test needs, applied without anyone having to remember them (a pytest plugin,
registered in ``tests/conftest.py``).

``process``, ``browser``, ``postgres``, ``replicas`` and ``node`` say what a test starts besides
this Python process. Nobody writes them by hand:

- **At collection** each test is marked by what its code reaches. The test function, every fixture
  it requests and everything they call in ``tests/`` (helpers of ``tests/conftest.py``,
  ``tests/support/`` and other test modules, followed through imports, aliases, classes and
  decorators) is read from its bytecode, down to the calls that start something: ``anyio`` /
  ``asyncio`` / ``subprocess`` / ``os`` process functions and the ``mcp`` stdio client (``process``),
  Playwright (``browser``), the ``postgres_cluster`` fixture (``postgres``), HAProxy's ``balancer``
  (``replicas``) and a command naming ``node``, ``npm`` or ``npx`` (``node``). ``-m "not process"``
  then deselects them before anything runs.
- **While the tests run** a guard watches every process this Python process starts (an audit hook
  on ``subprocess.Popen``, ``os.posix_spawn``, ``os.fork``, ``os.system``) and tells them apart by
  their command (``initdb``/``pg_ctl``: ``postgres``; ``haproxy``: ``replicas``; Playwright's driver:
  ``browser``; ``node``/``npm``/``npx``: ``node``; anything else: ``process``). A process started
  while a fixture is set up counts for every test that uses that fixture, also one shared by a
  module or the session, also one requested through ``request.getfixturevalue``. A test that started
  something it is not marked for fails, naming the marker, so the markers cannot rot: what the scan
  cannot see (a process started from ``src/``, a fixture chosen by a parameter) gets an explicit
  ``pytest.mark.<name>`` or ``pytest.param(..., marks=...)``, and the guard says where.

``docs`` (the front door, the docs and the distributions) is a subject, not a resource: the
modules about it carry ``pytestmark = pytest.mark.docs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dis
import inspect
import os
import subprocess
import sys
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

#: what a test may start: the markers the guard checks
RESOURCES = ("process", "browser", "postgres", "replicas", "node")
NODE_COMMANDS = frozenset({"node", "npm", "npx"})


# --------------------------------------------------------------------------- the scan at collection


def _roots() -> dict[int, tuple[object, frozenset[str]]]:
    """The calls that start something, by identity (the object is kept so its id stays its own)."""
    process = frozenset({"process"})
    found: dict[int, tuple[object, frozenset[str]]] = {}

    def add(owner: object, names: Iterable[str], needs: frozenset[str]) -> None:
        for name in names:
            obj = getattr(owner, name, None)
            for each in (obj, _unwrap(obj)) if obj is not None else ():
                found[id(each)] = (each, needs)

    add(subprocess, ["Popen", "run", "call", "check_call", "check_output", "getoutput"], process)
    add(os, ["system", "popen", "posix_spawn", "posix_spawnp", "fork", "forkpty", "spawnv"], process)
    add(asyncio, ["create_subprocess_exec", "create_subprocess_shell"], process)
    add(anyio, ["run_process", "open_process"], process)
    with contextlib.suppress(ImportError):
        from mcp.client import stdio

        add(stdio, ["stdio_client", "StdioServerParameters"], process)
    with contextlib.suppress(ImportError):
        from playwright import async_api, sync_api

        add(async_api, ["async_playwright"], frozenset({"browser"}))
        add(sync_api, ["sync_playwright"], frozenset({"browser"}))
    # what starts a resource of its own: it needs that marker, not the processes it runs
    from tests.support import haproxy, postgres

    add(postgres, ["postgres_cluster"], frozenset({"postgres"}))
    add(haproxy, ["balancer"], frozenset({"replicas"}))
    return found


def _unwrap(obj: Any) -> Any:
    """The function behind a fixture, a decorator (``functools.wraps``), a static/class method."""
    for _ in range(10):
        if hasattr(obj, "_get_wrapped_function"):  # a pytest fixture
            obj = obj._get_wrapped_function()
        elif isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
        elif isinstance(obj, types.MethodType):
            obj = obj.__func__
        elif inspect.isfunction(obj) and hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        else:
            return obj
    return obj


def _ours(obj: Any) -> bool:
    """Code of the tests (``tests.*``, a conftest, a ``test_*`` module), which the scan follows; a
    library's or the server's code it does not."""
    module = getattr(obj, "__module__", None) or ""
    return module in ("tests", "conftest") or module.startswith(("tests.", "test_"))


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """A function's code and the code of everything defined in it (nested functions, lambdas)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


class Scan:
    """What a function, a class or a fixture of tests/ reaches, read from bytecode and memoised."""

    def __init__(self) -> None:
        self.roots = _roots()
        self.memo: dict[int, frozenset[str]] = {}
        self.keep: list[object] = []  # memo keys are ids: keep what was scanned alive

    def needs(self, obj: Any) -> frozenset[str]:
        obj = _unwrap(obj)
        key = id(obj)
        if key in self.roots:
            return self.roots[key][1]
        if key in self.memo:
            return self.memo[key]
        if not _ours(obj) or not (inspect.isfunction(obj) or inspect.isclass(obj)):
            return frozenset()
        self.memo[key] = frozenset()  # a cycle reaches nothing new
        self.keep.append(obj)
        found: set[str] = set()
        if inspect.isclass(obj):
            for value in vars(obj).values():
                if isinstance(value, property):
                    found |= self.needs(value.fget)
                elif inspect.isfunction(value) or isinstance(value, staticmethod | classmethod):
                    found |= self.needs(value)
        else:
            for code in _codes(obj.__code__):
                found |= self._code(code, obj.__globals__)
            for cell in obj.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    found |= self.needs(cell.cell_contents)
        self.memo[key] = frozenset(found)
        return self.memo[key]

    def _code(self, code: types.CodeType, namespace: dict[str, Any]) -> set[str]:
        found: set[str] = set()
        if NODE_COMMANDS & {c for c in code.co_consts if isinstance(c, str)}:
            found.add("node")
        current: Any = None  # what the last load left on the stack, for a following attribute
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                current = namespace.get(ins.argval)
            elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and current is not None:
                current = getattr(current, ins.argval, None) if _attribute_of(current) else None
            else:
                current = None
                continue
            if current is not None:
                found |= self.needs(current)
        return found


def _attribute_of(obj: Any) -> bool:
    """Whether ``obj.name`` is worth following: a module, or a class of tests/."""
    return inspect.ismodule(obj) or (inspect.isclass(obj) and _ours(obj))


def _fixture_functions(item: pytest.Item) -> Iterator[Any]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    for name in item.fixturenames:  # type: ignore[attr-defined]
        for fixturedef in info.name2fixturedefs.get(name, ()):
            yield fixturedef.func


def mark_by_needs(items: list[pytest.Item]) -> None:
    scan = Scan()
    for item in items:
        function = getattr(item, "function", None)
        needs = set(scan.needs(function)) if function is not None else set()
        for fixture in _fixture_functions(item):
            needs |= scan.needs(fixture)
        for name in sorted(needs):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)


# ------------------------------------------------------------------------- the guard while running


def kind_of(argv: Iterable[Any]) -> str:
    """The marker a started command needs."""
    words = [str(word) for word in argv]
    names = [Path(word).name for word in words]
    if {"initdb", "pg_ctl", "postgres", "pg_ctlcluster"} & set(names[:6]):  # runuser -u nobody -- initdb
        return "postgres"
    if "haproxy" in names[:1]:
        return "replicas"
    if words and ("playwright" in words[0] or any("playwright" in w and w.endswith("cli.js") for w in words)):
        return "browser"
    if names and names[0] in NODE_COMMANDS:
        return "node"
    return "process"


class Guard:
    """Records what is started, for the fixture being set up or the test running."""

    def __init__(self) -> None:
        self.recording: set[str] | None = None
        self.by_fixture: dict[tuple[int, int], tuple[object, set[str]]] = {}
        """What was started while each fixture was set up: by its id (the fixture is kept alive) and
        its parameter's index, since one parameter of a fixture may start what another does not."""

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        recording = self.recording
        if recording is None or not event.startswith(("subprocess.", "os.")):
            return
        if event == "subprocess.Popen":
            executable, argv = args[0], args[1]
            argv = [argv] if isinstance(argv, str | bytes) else list(argv or [])
            recording.add(kind_of([executable or (argv[0] if argv else ""), *argv[1:]]))
        elif event in ("os.posix_spawn", "os.spawn"):
            recording.add(kind_of([args[0], *list(args[1] or [])[1:]]))
        elif event in ("os.fork", "os.forkpty", "os.system"):
            recording.add("process")

    @contextlib.contextmanager
    def recording_into(self, into: set[str]) -> Iterator[None]:
        outer, self.recording = self.recording, into
        try:
            yield
        finally:
            self.recording = outer
            if outer is not None:
                outer |= into

    def started_by_fixtures(self, item: pytest.Item) -> set[str]:
        """What the fixtures this test used started, each with the parameter this test took."""
        request = getattr(item, "_request", None)
        defs = getattr(request, "_fixture_defs", None) or {}
        indices = getattr(getattr(item, "callspec", None), "indices", {})
        started: set[str] = set()
        for name, fixturedef in defs.items():
            started |= self.by_fixture.get((id(fixturedef), indices.get(name, 0)), (None, set()))[1]
        return started


GUARD = Guard()
_KEY = pytest.StashKey[set[str]]()


def pytest_configure(config: pytest.Config) -> None:
    if not getattr(sys, "_hitl_needs_guard", False):  # an audit hook cannot be removed: add it once
        sys.addaudithook(GUARD.hook)
        sys._hitl_needs_guard = True  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Before ``-m`` deselects anything (tryfirst)."""
    mark_by_needs(items)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Any:
    started: set[str] = set()
    try:
        with GUARD.recording_into(started):
            return (yield)
    finally:
        key = (id(fixturedef), getattr(request, "param_index", 0))
        GUARD.by_fixture.setdefault(key, (fixturedef, set()))[1].update(started)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    started = item.stash.setdefault(_KEY, set())
    with GUARD.recording_into(started):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    started = item.stash.setdefault(_KEY, set())
    with GUARD.recording_into(started):
        result = yield
    started |= GUARD.started_by_fixtures(item)
    missing = sorted(name for name in started if item.get_closest_marker(name) is None)
    if missing:
        marks = ", ".join(f"pytest.mark.{name}" for name in missing)
        where = "the test" if getattr(item, "callspec", None) is None else "the test or its parameter"
        pytest.fail(
            f"{item.nodeid} started what it is not marked for ({', '.join(missing)}), where the scan of "
            f"tests/support/needs.py cannot see it: mark {where} ({marks}; a parameter: "
            "pytest.param(..., marks=...)), or teach the scan the call.",
            pytrace=False,
        )
    return result
