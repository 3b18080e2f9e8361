"""What CI checks of the distributions (``make dist-check``, run by ``.ci/run`` after ``make test``).

After ``make dist`` (the wheel and sdist in dist/) and ``make mcpb`` (the bundle in dist/):

1. the wheel, installed into a fresh venv with no extras, answers ``tools/list`` over stdio, and
   none of the channels' extras came with it;
2. ``uvx --from dist/<wheel> hitl-mcp --version`` prints this version (uv from PyPI: the ``dist``
   extra, in the project's venv), and so does ``mcp-hitl --version``, the command ``uvx mcp-hitl``
   runs for server.json's package;
3. the command every file in examples/ gives, ``uvx --from /path/to/hitl-mcp hitl-mcp serve``, with
   this clone's path put in, answers ``tools/list``;
4. the Claude Desktop bundle, unpacked, started the way its manifest says (``uv run`` in the bundle,
   the optional settings empty as Claude Desktop passes them), answers ``tools/list``.

Every server gets a scratch state directory and a free port, never ~/.local/state nor 8765.
Run it with the project's venv: ``.venv/bin/python scripts/dist_check.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
WORK = ROOT / "build" / "dist-check"
PLACEHOLDER = "/path/to/hitl-mcp"  # what examples/ write for the clone's absolute path
BIN = Path(sys.executable).parent  # the project's venv, where the dist extra put uv and uvx


def say(text: str) -> None:
    print(f"dist-check: {text}", flush=True)


def fail(text: str) -> None:
    sys.exit(f"dist-check: FAILED: {text}")


def run(args: list[str | Path], env: dict[str, str] | None = None, timeout: float = 600) -> str:
    started = time.monotonic()
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if done.returncode != 0:
        fail(f"{' '.join(map(str, args))} exited {done.returncode}\n{done.stdout}{done.stderr}")
    say(f"ok ({time.monotonic() - started:.1f} s): {' '.join(map(str, args))}")
    return done.stdout


def version() -> str:
    text = (ROOT / "src" / "hitl_mcp" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    assert found
    return found.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(scratch: Path, **extra: str) -> dict[str, str]:
    """The environment a host would give the server, with a scratch state dir and a free inbox port."""
    state = Path(tempfile.mkdtemp(prefix="state-", dir=scratch))
    env = {**os.environ, "HITL_STATE_DIR": str(state), "HITL_PORT": str(free_port())}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # uv and uvx, as a host finds them on PATH
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")  # use this machine's Python, as CI tests it
    env.update(extra)
    return env


def tools_list(python: Path, command: list[str | Path], env: dict[str, str]) -> None:
    run([python, ROOT / "scripts" / "stdio_tools_list.py", *command], env=env)


def check_wheel(wheel: Path) -> None:
    venv = WORK / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", wheel])
    extras = ["slack_sdk", "twilio", "aiosmtplib", "aiohttp", "pytest", "mkdocs"]
    code = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in sys.argv[1:]))"
    if subprocess.run([python, "-c", code, *extras], check=False).returncode != 0:
        fail(f"the fresh venv holds an extra's package (one of {', '.join(extras)})")
    said = run([venv / "bin" / "hitl-mcp", "--version"]).strip()
    if said != f"hitl-mcp {version()}":
        fail(f"hitl-mcp --version said {said!r}, expected 'hitl-mcp {version()}'")
    tools_list(python, [venv / "bin" / "hitl-mcp", "serve"], server_env(WORK))


def check_uvx(wheel: Path) -> None:
    uvx = BIN / "uvx"
    if not uvx.exists():
        fail(f"no uvx beside {sys.executable}: install the dist extra (make dist does)")
    for command in ("hitl-mcp", "mcp-hitl"):  # mcp-hitl: what uvx runs for server.json's identifier
        said = run([uvx, "--isolated", "--from", wheel, command, "--version"], env=server_env(WORK)).strip()
        if said != f"hitl-mcp {version()}":
            fail(f"uvx --from {wheel.name} {command} --version said {said!r}")


def hitl_entry(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    servers = data.get("mcpServers") or data.get("servers")
    return servers["hitl"]


def check_examples() -> None:
    # the hosts that start the server (the *.http.* files reach a running one with an agent token)
    examples = sorted(p for p in (ROOT / "examples").glob("*.json") if ".http." not in p.name)
    if not examples:
        fail("no examples/*.json")
    commands = {path.name: [hitl_entry(path)["command"], *hitl_entry(path)["args"]] for path in examples}
    first = commands[examples[0].name]
    for name, command in commands.items():
        if command != first:
            fail(f"examples/{name} starts {command}, examples/{examples[0].name} starts {first}")
    if PLACEHOLDER not in first:
        fail(f"the examples' command {first} does not run from a clone ({PLACEHOLDER})")
    command = [str(ROOT) if part == PLACEHOLDER else part for part in first]
    tools_list(Path(sys.executable), command, server_env(WORK))


def check_bundle(bundle: Path) -> None:
    unpacked = WORK / "bundle"
    with zipfile.ZipFile(bundle) as z:
        z.extractall(unpacked)
    manifest = json.loads((unpacked / "manifest.json").read_text())
    config = manifest["server"]["mcp_config"]
    values = {"__dirname": str(unpacked)}
    for key, option in manifest.get("user_config", {}).items():
        values[f"user_config.{key}"] = str(option.get("default", ""))

    def fill(text: str) -> str:
        return re.sub(r"\$\{([^}]+)\}", lambda m: values[m.group(1)], text)

    env = {name: fill(value) for name, value in config.get("env", {}).items()}
    env = server_env(WORK, **{k: v for k, v in env.items() if k not in ("HITL_STATE_DIR", "HITL_PORT")})
    tools_list(Path(sys.executable), [config["command"], *map(fill, config["args"])], env)


def main() -> None:
    wheels = sorted(DIST.glob("*.whl"))
    bundles = sorted(DIST.glob("*.mcpb"))
    if len(wheels) != 1 or len(bundles) != 1:
        fail(f"expected one wheel and one .mcpb in dist/, found {[p.name for p in [*wheels, *bundles]]}")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    started = time.monotonic()
    check_wheel(wheels[0])
    check_uvx(wheels[0])
    check_examples()
    check_bundle(bundles[0])
    shutil.rmtree(WORK, ignore_errors=True)
    say(f"all passed in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
