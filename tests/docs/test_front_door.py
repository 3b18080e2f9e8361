"""The front door as a newcomer walks it (issue #39): the commands the README gives after ``make run``
work as typed, pages read on the forge show what the site shows, a "not yet" names nothing that is
done, no command installs the other project that holds the name ``hitl-mcp`` on the package index,
one recommendation for Claude Code's timeout, and the Node version the lock files need."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from pydantic import BaseModel

from hitl_mcp.channels import channel_module, channel_types
from hitl_mcp.config import Config
from tests.conftest import ROOT, bearer, free_port, sc, server_process

pytestmark = [pytest.mark.anyio, pytest.mark.docs]

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _sh_blocks(text: str) -> list[str]:
    """The ```sh blocks of a page, each dedented (a block in a list item is indented)."""
    return [
        textwrap.dedent(m["body"])
        for m in re.finditer(r"^(?P<i>[ ]*)```sh\n(?P<body>.*?)^(?P=i)```", text, re.S | re.M)
    ]


def _commands(block: str) -> list[str]:
    """A block's commands, without their comments (``# ...`` after two spaces or more)."""
    return [re.sub(r"\s{2,}#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


# --- pages that read on the forge -------------------------------------------------------------------

INLINED = re.compile(
    r"^(?P<i>[ ]*)<!-- (?P<path>[\w./-]+) -->\n(?P=i)```[a-z]*\n(?P<body>.*?)\n(?P=i)```$", re.S | re.M
)


@pytest.mark.parametrize("path", [p for p in DOCS if p.name != "changelog.md"], ids=_name)
def test_pages_read_on_the_forge_as_on_the_site(path: Path) -> None:
    """A snippet line (``--8<-- "examples/x.json"``) is shown as it is on the forge; the site alone
    fills it in. Files are inlined instead, each under a ``<!-- path -->`` comment, and kept equal to
    the file here. (docs/changelog.md is the site's copy of CHANGELOG.md, which the forge shows.)"""
    text = path.read_text()
    snippets = [line for line in text.splitlines() if line.strip().startswith("--8<--")]
    assert not snippets, f"{path.name} shows {snippets} on the forge: inline the file"
    for found in INLINED.finditer(text):
        shown = textwrap.dedent(found["body"]).rstrip("\n")
        source = ROOT / found["path"]
        assert source.is_file(), f"{path.name} inlines {found['path']}, which is no file"
        assert shown == source.read_text().rstrip("\n"), f"{path.name}: {found['path']} differs from the file"


def test_every_example_is_shown_inline_in_the_hosts_page() -> None:
    hosts = (ROOT / "docs" / "hosts.md").read_text()
    inlined = {m["path"] for m in INLINED.finditer(hosts)}
    assert {f"examples/{p.name}" for p in (ROOT / "examples").glob("*.json")} <= inlined


def test_the_site_still_inlines_only_the_changelog() -> None:
    assert (ROOT / "docs" / "changelog.md").read_text() == '--8<-- "CHANGELOG.md"\n'


# --- "not yet" ------------------------------------------------------------------------------------


def _models(annotation: Any, seen: set[type[BaseModel]]) -> None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return
        seen.add(annotation)
        for field in annotation.model_fields.values():
            _models(field.annotation, seen)
        return
    for arg in typing.get_args(annotation):
        _models(arg, seen)
    if isinstance(annotation, types.UnionType):
        for arg in annotation.__args__:
            _models(arg, seen)


def config_keys() -> set[str]:
    """Every key the config knows, at any depth, every channel type's included."""
    seen: set[type[BaseModel]] = set()
    _models(Config, seen)
    for kind in channel_types():
        _models(channel_module(kind).Config, seen)
    return {f.alias or name for model in seen for name, f in model.model_fields.items()}


ABSENT_HEADING = re.compile(r"^#+ (?:not yet|not in this version|limitations)\b", re.I | re.M)
ABSENT_SENTENCE = re.compile(r"\bnot (?:a )?config keys?\b|^not yet\b|^not in this version\b", re.I | re.M)


def absences(text: str) -> list[str]:
    """The paragraphs of a page that say something is missing: under a "Not yet" heading, or saying
    "not a config key" or "Not in this version: ..."."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found: list[str] = []
    for section in re.split(r"(?=^#+ )", text, flags=re.M):
        paragraphs = [p.strip() for p in section.split("\n\n") if p.strip()]
        if ABSENT_HEADING.match(section):
            found += paragraphs[1:]
        else:
            found += [p for p in paragraphs if ABSENT_SENTENCE.search(p)]
    return found


def headings(text: str) -> set[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {h.strip().lower() for h in re.findall(r"^#+ (.+)$", text, re.M)}


def _listed(paragraph: str) -> list[str]:
    """The things a "Not in this version: a, b and c." paragraph lists, without quotes or asides."""
    items = paragraph.split(":", 1)[1] if ":" in paragraph else paragraph
    items = re.sub(r"\([^)]*\)", "", items)
    return [i.strip(" .\n").lower() for i in re.split(r",|;|\band\b", items) if i.strip(" .\n")]


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_a_not_yet_names_nothing_that_is_done(path: Path) -> None:
    """A key a page calls missing is unknown to the config, and a feature it lists as "not in this
    version" is no section of the docs (remembered answers had their own section on the same page)."""
    known, every_heading = config_keys(), set().union(*(headings(p.read_text()) for p in DOCS))
    for paragraph in absences(path.read_text()):
        named = set(re.findall(r"`([a-z_][a-z0-9_]*)(?::[^`]*)?`", paragraph))
        keys = {k for k in named if f"`{k}:" in paragraph}
        assert not keys & known, f"{path.name} says {sorted(keys & known)} are missing: the config knows them"
        done = [item for item in _listed(paragraph) if item in every_heading]
        assert not done, f"{path.name} lists {done} as not in this version: the docs have a section on it"


def test_the_not_yet_check_finds_what_it_is_for() -> None:
    """The two kinds of stale line issue #39 found, as they read then."""
    page = (
        "## Not yet\n\nQuorum and delegation are later slices; `approvals:` and `delegations:` are not "
        "config keys yet.\n"
    )
    (paragraph,) = absences(page)
    assert {"approvals", "delegations"} <= config_keys()
    assert "`approvals:`" in paragraph
    listed = _listed(
        'Not in this version: remembered answers ("Approve & remember"), batch approval and pause.'
    )
    assert listed == ["remembered answers", "batch approval", "pause"]
    assert "remembered answers" in headings((ROOT / "docs" / "rules.md").read_text()) | {"remembered answers"}


# --- the package's name ---------------------------------------------------------------------------

STRANGER = re.compile(
    r"(?:pip3?|pipx|uv (?:tool|pip)) install\s+['\"]?hitl-mcp\b|uvx\s+hitl-mcp\b|--from[\s\"',]+hitl-mcp\b"
)
SHIPPED = [
    README,
    *DOCS,
    *(ROOT / "examples").glob("*.json"),
    *(ROOT / "configs").glob("*"),
    *(ROOT / "src").rglob("*.py"),
    *(ROOT / "src").rglob("*.yaml"),
    *(ROOT / "scripts").glob("*.py"),
    *(ROOT / "packaging").rglob("*.json"),
    ROOT / "server.json",
    ROOT / "deploy" / "Dockerfile",
    ROOT / "Makefile",
]


def test_no_command_installs_the_other_project_named_hitl_mcp() -> None:
    """``hitl-mcp`` on the package index is someone else's: every published form names ``mcp-hitl``,
    and the pages where people install say so."""
    for path in SHIPPED:
        if path.is_file():
            # the one place that may name it is the warning itself
            paragraphs = path.read_text(errors="replace").split("\n\n")
            found = [f for p in paragraphs if "another project" not in p for f in STRANGER.findall(p)]
            assert not found, f"{_name(path)}: {found} installs another project"
    assert PYPROJECT["project"]["name"] == "mcp-hitl"
    for page in (README, ROOT / "docs" / "install.md"):
        text = re.sub(r"\s+", " ", page.read_text())
        assert re.search(r"`hitl-mcp` on the (?:Python )?package index.{0,40}another project", text), (
            page.name
        )


def test_install_names_every_extra_of_all() -> None:
    (bundle,) = PYPROJECT["project"]["optional-dependencies"]["all"]
    extras = re.fullmatch(r"mcp-hitl\[(.*)\]", bundle)[1].split(",")  # type: ignore[index]
    for page in (README, ROOT / "docs" / "install.md"):
        text = page.read_text()
        missing = [e for e in extras if f"`{e}`" not in text and f"`.[{e}]`" not in text]
        assert not missing, f"{page.name} does not name the extras {missing} of .[all]"


# --- one recommendation for Claude Code's timeout -------------------------------------------------


def test_the_claude_code_examples_do_not_shorten_its_timeout() -> None:
    """Claude Code's own limit (about 28 h) outlasts a question's default 24 h: a ``timeout`` in an
    example could only shorten it, and cap a task's wait."""
    day_ms = 24 * 3600 * 1000
    for path in (ROOT / "examples").glob("claude-code*.json"):
        server = json.loads(path.read_text())["mcpServers"]["hitl"]
        assert server.get("timeout", day_ms + 1) > day_ms, (
            f"{path.name} caps a call at {server['timeout']} ms"
        )
    hosts = (ROOT / "docs" / "hosts.md").read_text()
    assert 'Set no `"timeout"`' in hosts
    assert "no `timeout`" in README.read_text()


# --- retries ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [README, *DOCS], ids=_name)
def test_never_asked_twice_says_when(path: Path) -> None:
    """Without a key, a repeat re-attaches only within one MCP session (docs/tools.md): a page that
    promises a retry never asks twice says so."""
    text = re.sub(r"\s+", " ", path.read_text())
    for found in re.finditer(r"never asks (?:the person )?twice", text):
        before = text[max(0, found.start() - 200) : found.start()]
        assert "idempotency_key" in before and "same MCP session" in before, f"{path.name}: {before!r}"


# --- Node -----------------------------------------------------------------------------------------


def _version(text: str) -> tuple[int, int, int]:
    major, minor, patch, *_ = [int(p) if p.isdigit() else 0 for p in re.findall(r"\d+|x|\*", text)[:3]] + [
        0,
        0,
        0,
    ]
    return major, minor, patch


def _satisfies(version: tuple[int, int, int], ranges: str) -> bool:
    """npm's ``engines`` ranges, as far as the lock files use them: ``>=``, ``>``, ``<``, ``^``, ``~``,
    ``x``, bare versions, spaces (and) and ``||`` (or)."""

    def one(comparator: str) -> bool:
        m = re.fullmatch(r"(>=|<=|>|<|\^|~|=)?\s*v?([\d.x*]+)", comparator.strip())
        if m is None:
            raise AssertionError(f"an engines range this test cannot read: {comparator!r}")
        op, text = m[1] or "=", m[2]
        bound = _version(text)
        given = len([p for p in text.split(".") if p not in ("x", "*")])
        if op == ">=":
            return version >= bound
        if op == ">":
            return version > bound
        if op == "<":
            return version < bound
        if op == "<=":
            return version <= bound
        if op == "^":
            return version >= bound and version[0] == bound[0]
        if op == "~":
            return version >= bound and version[:2] == bound[:2]
        return version[:given] == bound[:given]

    return any(
        all(one(c) for c in re.findall(r"(?:>=|<=|>|<|\^|~|=)?\s*v?[\d.x*]+", alternative))
        for alternative in ranges.split("||")
    )


def oldest_node(lock: Path) -> tuple[int, int, int]:
    """The oldest Node release every package in a lock file declares it runs on."""
    ranges = [
        p["engines"]["node"]
        for p in json.loads(lock.read_text())["packages"].values()
        if isinstance(p.get("engines"), dict) and "node" in p["engines"]
    ]
    candidates = sorted({_version(v) for r in ranges for v in re.findall(r"\d+(?:\.\d+){0,2}", r)})
    return next(v for v in candidates if all(_satisfies(v, r) for r in ranges))


def test_the_node_version_the_docs_give_is_the_lock_files() -> None:
    """docs/development.md said Node 20 while the pinned Inspector wants 22.19 or newer (npm's
    EBADENGINE warnings): the figures given are what the lock files need."""
    clients, tools = (
        oldest_node(ROOT / "tests" / "ts" / "package-lock.json"),
        oldest_node(ROOT / "tools" / "package-lock.json"),
    )
    shown = f"{clients[0]}.{clients[1]}"
    development = (ROOT / "docs" / "development.md").read_text()
    assert f"Node\n{shown} or newer" in development or f"Node {shown} or newer" in development.replace(
        "**", ""
    )
    assert f"Node {tools[0]} or newer" in development.replace("\n", " ")
    assert f"Node {shown}" in README.read_text().replace("\n", " ")
    assert f"Node {shown} or newer" in (ROOT / "docs" / "install.md").read_text()
    for project, oldest in (("tests/ts", clients), ("tools", tools)):
        declared = json.loads((ROOT / project / "package.json").read_text())["engines"]["node"]
        assert _version(declared.lstrip(">=")) == oldest, f"{project}/package.json says {declared}"


def test_the_version_reader_reads_npm_ranges() -> None:
    assert _satisfies((20, 19, 0), "^20.19.0 || >=22.12.0") and not _satisfies(
        (21, 0, 0), "^20.19.0 || >=22.12.0"
    )
    assert _satisfies((22, 19, 0), ">=22.19.0") and not _satisfies((22, 18, 9), ">=22.19.0")
    assert _satisfies((10, 0, 0), ">= 10.x") and _satisfies((14, 18, 0), "^14.17.0 || ^16.13.0 || >=18.0.0")


# --- the commands after make run, as typed ----------------------------------------------------------


#: the pages that walk a newcomer from ``make run`` to an answer
WALKS = [README, ROOT / "docs" / "getting-started.md"]


def _activate_block(page: Path) -> list[str]:
    blocks = [b for b in _sh_blocks(page.read_text()) if b.startswith("source .venv/bin/activate")]
    assert len(blocks) == 1, "the block after make run starts by putting hitl-mcp on the PATH"
    return _commands(blocks[0])


def _terminal_block(page: Path) -> list[str]:
    (block,) = [b for b in _sh_blocks(page.read_text()) if b.startswith("hitl-mcp pending")]
    return _commands(block)


def test_make_run_says_what_to_type_next() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", "-C", str(ROOT), "run"], capture_output=True, text=True, timeout=60)
    hint = next(line for line in done.stdout.splitlines() if line.startswith("echo "))
    assert f"source {_activate_block(README)[0].split()[1]}" in hint and "hitl-mcp inbox --open" in hint


@pytest.mark.parametrize("page", WALKS, ids=_name)
def test_the_walk_says_to_run_them_after_make_run(page: Path) -> None:
    text = page.read_text()
    assert (
        text.index("make run     #")
        < text.index("source .venv/bin/activate")
        < text.index("hitl-mcp pending")
    )


@pytest.mark.parametrize("page", WALKS, ids=_name)
async def test_the_commands_after_make_run_work_as_typed(tmp_path: Path, page: Path) -> None:
    """``make run PORT=P`` (a free port, not 8765), then, in another shell whose ``PATH`` lacks the
    clone's .venv, with a throwaway home: the README's commands as written. They put ``hitl-mcp`` on
    the path, open the inbox on port P (which nothing told them), and answer a question asked over MCP
    with the terminal commands of "Answer your first request" (its example id replaced by the real one)."""
    home = tmp_path / "home"
    home.mkdir()
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {opened}\n')
    browser.chmod(0o755)
    venv = Path(sys.prefix)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != venv / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "XDG_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), PATH=path, BROWSER=str(browser), PYTHONUNBUFFERED="1")
    port = free_port()

    def shell(lines: list[str]) -> list[str]:
        script = "set -e\n" + "\n".join(lines).replace(".venv/", f"{venv}/")
        return ["bash", "-c", script]

    async def run(lines: list[str]) -> str:
        with anyio.fail_after(60):
            done = await anyio.run_process(shell(lines), env=env, cwd=ROOT, check=False)
        said = f"{lines}\nstdout: {done.stdout.decode()}\nstderr: {done.stderr.decode()}"
        assert done.returncode == 0, said
        return done.stdout.decode()

    assert "hitl-mcp" not in [Path(p).name for p in path.split(os.pathsep)]
    make_run = ["-m", "hitl_mcp", "serve", "--transport", "http", "--port", str(port)]
    async with server_process(make_run, env):
        activate = _activate_block(page)
        await run(activate)
        assert opened.read_text().startswith(f"http://127.0.0.1:{port}/login?token=")
        token = (home / ".local" / "state" / "hitl-mcp" / "web-token").read_text().strip()
        out: dict[str, Any] = {}

        async def ask() -> None:
            async with Client(bearer(f"http://127.0.0.1:{port}/mcp", token), mode="legacy") as client:
                out.update(
                    sc(
                        await client.call_tool(
                            "ask_user",
                            {
                                "question": "Which region?",
                                "choices": ["eu-west-1", "us-east-1"],
                                "wait_seconds": 50,
                            },
                        )
                    )
                )

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            setup = [line for line in activate if not line.startswith("hitl-mcp")]
            listing = ""
            with anyio.fail_after(30):
                while "Which region?" not in listing:
                    listing = await run([*setup, "hitl-mcp pending"])
            request_id = listing.split()[0]
            steps = [line.replace("3f9c", request_id[:4]) for line in _terminal_block(page)]
            steps = [line for line in steps if not line.startswith(("hitl-mcp approve", "hitl-mcp deny"))]
            said = await run([*setup, *steps])
            assert f"{request_id}: eu-west-1" in said
        assert (out["status"], out["answer"], out["channel"]) == ("answered", "eu-west-1", "cli")
