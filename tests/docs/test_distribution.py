"""The front door and the distributions: the README, the docs' links, the examples, server.json against
the registry's schema, the Claude Desktop bundle's manifest, the Dockerfile, what ``make run``
installs, the port, ``--version``, the license and the changelog.

What needs a network (building the wheel, uvx, the bundle started with uv, ``mcpb validate``) runs in
CI after ``make test``: ``make dist-check`` (scripts/dist_check.py). The docs build with
``mkdocs build --strict`` in ``make test``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import pytest
from mcp import Client

from hitl_mcp import __version__
from hitl_mcp.channels import channel_types
from hitl_mcp.cli.main import build_parser
from hitl_mcp.config import ConfigError, parse_config, resolve_http_port
from tests.conftest import (
    PYTHON,
    ROOT,
    TOOLS,
    free_port,
    running,
    serve_args,
    server_env,
    server_process,
    write_config,
)

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
SERVER_JSON = ROOT / "server.json"
SCHEMA = ROOT / "packaging" / "server.schema.json"
SCHEMA_SHA256 = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0"  # docs/development.md
MANIFEST = ROOT / "packaging" / "mcpb" / "manifest.json"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))
#: hosts that start the server themselves over stdio; the others (*.http.*) reach a running one
STDIO_EXAMPLES = [p for p in EXAMPLES if ".http." not in p.name]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
CLONE = "/path/to/hitl-mcp"  # the examples' stand-in for the clone's absolute path
NO: dict[str, str] = {}  # an empty transport
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

pytestmark = [pytest.mark.anyio, pytest.mark.docs]


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


# --- the README ---------------------------------------------------------------------------------


def test_readme_is_the_front_door() -> None:
    raw = README.read_bytes()
    assert len(raw) <= 12_000, f"README.md is {len(raw):,} bytes; the front door stays under 12,000"
    text = raw.decode()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    assert any("make run" in b and "make test" in b for b in blocks), "the two set-up commands, in one block"
    # for a stdio host with no forms the inbox is the only channel: said near the top, with its command
    top = text[:2_000]
    assert "hitl-mcp inbox --open" in top and "Claude Desktop" in top and "only channel" in top
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections == [
        "Install",
        "Add it to your host",
        "Answer your first request",
        "Compared with other tools",
        "Where to go next",
    ]


def test_readme_comparison_is_the_docs_comparison_in_short() -> None:
    """The README's table names what the docs' table does, tool by tool, and sends the reader there."""
    readme, docs = README.read_text(), (ROOT / "docs" / "comparison.md").read_text()
    section = readme.split("## Compared with other tools", 1)[1].split("\n## ", 1)[0]
    assert "(docs/comparison.md)" in section

    def rows(text: str) -> dict[str, list[str]]:
        found = {}
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| ") and len(cells) == 7 and cells[0] != "tool":
                found[re.sub(r"\*\*|\(.*?\)", "", cells[0]).strip()] = [c[:1] for c in cells[1:6]]
        return found

    short, long = rows(section), rows(docs)
    assert len(short) == 7 and short["hitl-mcp"] == ["✔"] * 5
    for tool, marks in short.items():  # the same mark in both tables: ✔ ◐ ✗ or ?
        assert long[tool] == marks, tool


def test_readme_names_the_registry_entry() -> None:
    """The registry proves the package is ours by this line in the package's description."""
    names = re.findall(r"<!-- mcp-name: (\S+) -->", README.read_text())
    assert names == [_json(SERVER_JSON)["name"]]


def test_readme_images_work_on_a_package_page() -> None:
    """A package page shows the README without the repository beside it: no relative image."""
    text = README.read_text()
    sources = re.findall(r"!\[[^\]]*\]\(([^)\s]+)", text) + re.findall(r"<img[^>]*\ssrc=\"([^\"]+)\"", text)
    relative = [s for s in sources if not s.startswith("https://")]
    assert not relative, f"relative images break on a package page: {relative}"


def _links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code is shown, not linked
    text = re.sub(r"`[^`\n]*`", "", text)
    return (
        re.findall(r"\]\(([^)\s]+)", text)
        + re.findall(r"<((?:https?|mailto|ftp):[^>]+)>", text)
        + re.findall(r"(?:href|src)=\"([^\"]+)\"", text)
    )


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", [README, ROOT / "CHANGELOG.md", *DOCS], ids=_name)
def test_links_stay_inside_the_repository(path: Path) -> None:
    outside = [link for link in _links(path.read_text()) if re.match(r"[a-z]+:|//", link)]
    assert not outside, f"{path.name} links outside the repository: {outside}"
    for link in _links(path.read_text()):
        target = link.split("#")[0]
        if target:  # the site checks anchors (mkdocs --strict); here: the file is in the repository
            assert (path.parent / target).exists(), f"{path.name}: {link} names no file"


PUBLISHED = re.compile(r"--from[\s\"',]+mcp-hitl\b|uvx mcp-hitl\b|install '?mcp-hitl\b")
FROM_A_CLONE = re.compile(re.escape(CLONE) + r"|install \.|install -e '\.\[|install '\.\[")


@pytest.mark.parametrize("path", [README, *DOCS, *EXAMPLES, *CONFIGS], ids=_name)
def test_published_forms_are_marked_and_beside_one_that_works_today(path: Path) -> None:
    """mcp-hitl is not on the package index yet: every command that needs it says so, and the same
    page gives one that works from a clone."""
    text = path.read_text()
    for found in PUBLISHED.finditer(text):
        before = text[max(0, found.start() - 400) : found.start()]
        assert "published" in before.lower(), f"{path.name}: {found.group()!r} is not marked as published"
        assert FROM_A_CLONE.search(text), f"{path.name} gives no command that works from a clone"


def test_examples_run_from_a_clone() -> None:
    """One file per host, each running the clone; scripts/dist_check.py runs that command in CI.
    (The HTTP ones, to a running server with an agent token, are run by test_example_claude_code.)"""
    assert {p.name for p in EXAMPLES} - {p.name for p in STDIO_EXAMPLES} == {
        "claude-code.http.mcp.json",
        "vscode.http.mcp.json",
    }
    assert {p.name for p in STDIO_EXAMPLES} == {
        "claude_desktop_config.json",
        "claude-code.mcp.json",
        "vscode.mcp.json",
        "cursor.mcp.json",
        "windsurf.mcp_config.json",
    }
    readme, hosts = README.read_text(), (ROOT / "docs" / "hosts.md").read_text()
    for path in STDIO_EXAMPLES:
        data = _json(path)
        entry = (data.get("mcpServers") or data["servers"])["hitl"]
        assert [entry["command"], *entry["args"]] == ["uvx", "--from", CLONE, "hitl-mcp", "serve"], path.name
        # nothing that uvx would not pass on, and no config file that nothing creates
        assert set(entry.get("env", {})) <= {"HITL_WEB_TOKEN"}, path.name
        assert f"(examples/{path.name})" in readme, f"README's host table lacks {path.name}"
        assert f"<!-- examples/{path.name} -->" in hosts, f"docs/hosts.md does not show {path.name}"


# --- consistency ------------------------------------------------------------------------------------

TEXTS = [README, *DOCS, *CONFIGS, ROOT / "src" / "hitl_mcp" / "config" / "starter.yaml"]


@pytest.mark.parametrize("path", TEXTS, ids=_name)
def test_only_channels_that_exist(path: Path) -> None:
    text = path.read_text()
    named = set(re.findall(r"\btype: ([a-z_]+)", text)) - {"stdio", "named", "positional"}
    assert named <= set(channel_types()), f"{path.name} names channel types {named - set(channel_types())}"
    wished = {"telegram", "ntfy", "discord", "pushover", "whatsapp", "mattermost", "teams"}
    for absent in sorted(wished - set(channel_types())):
        assert absent not in text.lower(), f"{path.name} mentions {absent}, which is no channel of hitl-mcp"


def test_one_name_for_the_web_token() -> None:
    auth = (ROOT / "src" / "hitl_mcp" / "web" / "auth.py").read_text()
    assert 'env.get("HITL_WEB_TOKEN")' in auth
    for path in [*TEXTS, *EXAMPLES, MANIFEST, SERVER_JSON]:
        # the web token's one name, and the agent token's (the hook's, and the HTTP examples')
        other = set(re.findall(r"\bHITL_[A-Z_]*TOKEN\b", path.read_text())) - {
            "HITL_WEB_TOKEN",
            "HITL_AGENT_TOKEN",
        }
        assert not other, f"{path.name} names a token {other}"


# --- server.json and the registry's schema ------------------------------------------------------


def _declared(schema: dict[str, Any], node: dict[str, Any]) -> set[str]:
    """Every property a definition names, through its $refs and allOfs."""
    if "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    keys = set(node.get("properties", {}))
    for part in node.get("allOf", []) + node.get("anyOf", []):
        keys |= _declared(schema, part)
    return keys


def _schema() -> dict[str, Any]:
    return _json(SCHEMA)


def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_schema(), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def test_the_vendored_schema_is_the_registry_schema_of_2025_12_11() -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256
    schema = _schema()
    assert schema["$id"] == "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
    assert _json(SERVER_JSON)["$schema"] == schema["$id"]


def test_server_json_is_valid() -> None:
    server = _json(SERVER_JSON)
    errors = [e.message for e in _validator().iter_errors(server)]
    assert not errors
    # the schema allows any extra key: refuse the ones it does not name (snake_case would pass it)
    schema = _schema()
    definitions = schema["definitions"]
    assert set(server) <= _declared(schema, definitions["ServerDetail"])
    for package in server["packages"]:
        assert set(package) <= _declared(schema, definitions["Package"])
        for argument in package.get("packageArguments", []):
            assert set(argument) <= _declared(schema, definitions["PositionalArgument"]) | {"name"}
        for variable in package.get("environmentVariables", []):
            assert set(variable) <= _declared(schema, definitions["KeyValueInput"])


@pytest.mark.parametrize(
    "change",
    [
        {"version": "1." * 128},
        {"description": "x" * 101},
        {"name": "hitl-mcp"},
        {"packages": [{"registryType": "pypi", "identifier": "mcp-hitl", "version": "0.1.0"}]},
        {
            "packages": [
                {"registryType": "pypi", "identifier": "mcp-hitl", "version": "latest", "transport": NO}
            ]
        },
    ],
    ids=["long-version", "long-description", "name-without-namespace", "no-transport", "package-latest"],
)
def test_the_schema_refuses_what_the_registry_refuses(change: dict[str, Any]) -> None:
    assert list(_validator().iter_errors({**_json(SERVER_JSON), **change}))


def test_server_json_describes_this_package() -> None:
    server = _json(SERVER_JSON)
    assert server["version"] == __version__
    (package,) = server["packages"]
    assert package["registryType"] == "pypi"
    assert package["identifier"] == PYPROJECT["project"]["name"] == "mcp-hitl"
    assert package["version"] == __version__
    assert package["transport"] == {"type": "stdio"}
    # uvx runs the command named as the package: mcp-hitl must be one of the package's commands
    assert package["runtimeHint"] == "uvx"
    scripts = PYPROJECT["project"]["scripts"]
    assert scripts[package["identifier"]] == scripts["hitl-mcp"] == "hitl_mcp.cli:main"
    args = [a["value"] for a in package["packageArguments"]]
    assert args == ["serve"] and build_parser().parse_args(args).transport == "stdio"
    sources = "\n".join(p.read_text() for p in (ROOT / "src" / "hitl_mcp").rglob("*.py"))
    for variable in package["environmentVariables"]:
        assert f'"{variable["name"]}"' in sources, f"nothing reads {variable['name']}"
        assert variable["isRequired"] is False


# --- the Claude Desktop bundle ----------------------------------------------------------------------


async def test_bundle_manifest_matches_the_code(state_dir: Path) -> None:
    manifest = _json(MANIFEST)
    assert manifest["manifest_version"] == "0.4" and manifest["version"] == __version__
    server = manifest["server"]
    assert server["type"] == "uv" and server["entry_point"] == "server/main.py"
    assert server["entry_point"] in server["mcp_config"]["args"]
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
    assert tools == TOOLS == {t["name"] for t in manifest["tools"]}


def test_bundle_settings_reach_the_server() -> None:
    manifest = _json(MANIFEST)
    env = manifest["server"]["mcp_config"]["env"]
    settings = manifest["user_config"]
    used = {m for value in env.values() for m in re.findall(r"\$\{user_config\.([a-z_]+)\}", value)}
    assert used == set(settings), "every setting is passed on, and only settings are"
    for key, option in settings.items():
        # Claude Desktop leaves ${user_config.x} as written when x has no value: an empty default
        # makes it an empty string, which hitl-mcp reads as not set
        assert option["required"] is False and option["default"] == "", key
    sources = "\n".join(p.read_text() for p in (ROOT / "src" / "hitl_mcp").rglob("*.py"))
    configs = "\n".join(p.read_text() for p in (ROOT / "configs").glob("*.yaml"))
    entry = (ROOT / "packaging" / "mcpb" / "main.py").read_text()
    for name in env:
        assert f'"{name}"' in sources or f"${{{name}}}" in configs or f'"{name}"' in entry, name


def test_bundle_entry_point_takes_the_config_setting(tmp_path: Path, state_dir: Path) -> None:
    bad = tmp_path / "mine.yaml"
    bad.write_text("server:\n  prot: 1\n")
    done = subprocess.run(
        [PYTHON, str(ROOT / "packaging" / "mcpb" / "main.py")],
        env=server_env(state_dir, HITL_BUNDLE_CONFIG=str(bad)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "mine.yaml:2: server.prot" in done.stderr


# --- the Dockerfile (no Docker engine here: what can be checked without one) ----------------------


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    ]


def test_dockerfile_shape() -> None:
    steps = _instructions()
    froms = [arg for op, arg in steps if op == "FROM"]
    assert len(froms) == 2 and " AS " in froms[0], "multi-stage: build, then run"
    final = steps[[op for op, _ in steps].index("FROM", 1) :]
    users = [arg for op, arg in final if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(arg for op, arg in final if op == "ENV")))
    volumes = json.loads(next(arg for op, arg in final if op == "VOLUME"))
    assert env["HITL_STATE_DIR"] in volumes
    label = next(arg for op, arg in final if op == "LABEL")
    assert label == f'io.modelcontextprotocol.server.name="{_json(SERVER_JSON)["name"]}"'
    kept = (ROOT / ".dockerignore").read_text()
    for op, arg in steps:
        if op == "COPY" and not arg.startswith("--from"):
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), source
                assert f"!{source.rstrip('/')}" in kept.replace("/\n", "\n"), (
                    f".dockerignore leaves out {source}"
                )
    command = json.loads(next(arg for op, arg in final if op == "CMD"))
    assert command[0] == "hitl-mcp"
    args = build_parser().parse_args(command[1:])
    assert (args.transport, args.host, args.port) == ("http", "0.0.0.0", 8765)


def _healthcheck() -> list[str]:
    arg = next(arg for op, arg in _instructions() if op == "HEALTHCHECK")
    command = json.loads(arg[arg.index("CMD") + 3 :].strip())
    assert command[0] == "python" and "http://127.0.0.1:8765/healthz" in command[-1]
    return command


async def test_dockerfile_healthcheck_passes_against_a_server_and_fails_without(
    tmp_path: Path, state_dir: Path
) -> None:
    port = free_port()
    command = [PYTHON, *_healthcheck()[1:]]
    command[-1] = command[-1].replace("8765", str(port))
    with anyio.fail_after(30):
        assert (await anyio.run_process(command, check=False)).returncode != 0  # nothing listening
    config = write_config(tmp_path / "hitl.yaml", port)
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        with anyio.fail_after(30):
            assert (await anyio.run_process(command, check=False)).returncode == 0


# --- make run, the port, --version ----------------------------------------------------------------


def _make_dry_run(tmp_path: Path, *args: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), f"VENV={tmp_path / 'venv'}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_make_run_installs_only_what_the_server_needs(tmp_path: Path) -> None:
    out = _make_dry_run(tmp_path, "run")
    installs = [line for line in out.splitlines() if "pip install" in line]
    assert len(installs) == 1 and installs[0].endswith("-e '.[all]'"), installs
    assert "serve --transport http" in out and "--port" not in out
    assert "serve --transport http --port 9000" in _make_dry_run(tmp_path, "run", "PORT=9000")


def test_make_test_adds_the_test_extras_and_builds_the_docs(tmp_path: Path) -> None:
    out = _make_dry_run(tmp_path, "test")
    assert "-e '.[test]'" in out and "mkdocs build --strict" in out
    assert "mcp-hitl[all,docs]" in PYPROJECT["project"]["optional-dependencies"]["test"]


def test_port_comes_from_the_option_then_hitl_port_then_the_config() -> None:
    config = parse_config("server:\n  http: {port: 9001}\n", source="hitl.yaml")
    assert resolve_http_port(config, None, {}) == 9001
    assert resolve_http_port(config, None, {"HITL_PORT": "9002"}) == 9002
    assert resolve_http_port(config, 9003, {"HITL_PORT": "9002"}) == 9003
    assert resolve_http_port(config, None, {"HITL_PORT": ""}) == 9001
    for bad in ("http", "0", "70000", "-1"):
        with pytest.raises(ConfigError, match=r"\$HITL_PORT must be a port number"):
            resolve_http_port(config, None, {"HITL_PORT": bad})


async def test_serve_listens_on_hitl_port(tmp_path: Path, state_dir: Path) -> None:
    configured, wanted = free_port(), free_port()
    config = write_config(tmp_path / "hitl.yaml", configured)
    env = server_env(state_dir, HITL_PORT=str(wanted))
    async with server_process(serve_args(config, "--transport", "http"), env):
        async with httpx2.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{wanted}/healthz")).json()["status"] == "ok"
            with pytest.raises(httpx2.ConnectError):
                await http.get(f"http://127.0.0.1:{configured}/healthz")


def test_version() -> None:
    for command in ([PYTHON, "-m", "hitl_mcp", "--version"],):
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        assert done.stdout.strip() == f"hitl-mcp {__version__}"
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "src/hitl_mcp/__init__.py"


# --- license, changelog, project URLs -------------------------------------------------------------


def test_license_changelog_and_urls() -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "the hitl-mcp authors" in license_text
    assert PYPROJECT["project"]["license"] == "MIT" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    # no public home yet: the URLs name files of the sdist, never an invented host
    for label, url in PYPROJECT["project"]["urls"].items():
        assert (ROOT / url).is_file(), f"{label}: {url}"


def test_docs_nav_lists_every_page() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS:
        assert str(page.relative_to(ROOT / "docs")) in nav, f"mkdocs.yml's nav lacks {page.name}"


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_docs_pages_have_no_repeated_sections(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    headings = re.findall(r"^(#{1,3} .+)$", text, re.M)
    assert len(headings) == len(set(headings)), (
        f"{path.name} repeats {[h for h in headings if headings.count(h) > 1]}"
    )


@pytest.mark.parametrize(
    "path", [README, ROOT / "docs" / "hosts.md", ROOT / "docs" / "getting-started.md"], ids=_name
)
def test_inspector_examples_use_the_inspector_the_tests_run(path: Path) -> None:
    """tests/e2e/test_ts_client.py drives this Inspector version's CLI: its options, then `--`, then the
    server's command (whose --config is not the Inspector's)."""
    pinned = _json(ROOT / "tests" / "ts" / "package.json")["dependencies"]["@modelcontextprotocol/inspector"]
    commands = re.findall(r"npx (.*?)(?<!\\)\n", path.read_text().replace("\\\n", " "))
    assert commands, f"{path.name} shows no Inspector command"
    for command in commands:
        words = shlex.split(command)
        assert words[:3] == ["-y", f"@modelcontextprotocol/inspector@{pinned}", "--cli"], command
        assert "--method" in words and words.index("--") > words.index("--method"), command
        server = words[words.index("--") + 1 :]
        # the clone through uv, or the command on the PATH (the README's, after make run)
        assert server[:4] == ["uvx", "--from", CLONE, "hitl-mcp"] or server[:2] == ["hitl-mcp", "serve"], (
            command
        )
