"""Build the Claude Desktop bundle: ``dist/hitl-mcp-<version>.mcpb`` (``make mcpb``).

A ``uv``-type bundle (manifest 0.4) carries no dependencies, only the project: Claude Desktop runs
``uv run`` in the unpacked bundle, and uv installs what ``pyproject.toml`` names. This stages

    manifest.json       packaging/mcpb/manifest.json (its version must be hitl_mcp.__version__)
    server/main.py      packaging/mcpb/main.py, the entry point
    .python-version     packaging/mcpb/python-version, the Python uv picks (the one CI tests)
    pyproject.toml README.md LICENSE src/hitl_mcp/   the project, as the sdist has it

in ``build/mcpb/``, validates the manifest and packs it with the mcpb CLI (``tools/``, installed by
``npm ci --prefix tools``), then validates the packed bundle's manifest again: ``mcpb unpack`` into
``build/mcpb-check/``, ``mcpb validate`` there. Needs only python3 and that CLI.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging" / "mcpb"


def version() -> str:
    text = (ROOT / "src" / "hitl_mcp" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not found:
        sys.exit("scripts/mcpb.py: no __version__ in src/hitl_mcp/__init__.py")
    return found.group(1)


def stage(into: Path) -> None:
    shutil.rmtree(into, ignore_errors=True)
    (into / "server").mkdir(parents=True)
    shutil.copy(PACKAGING / "manifest.json", into / "manifest.json")
    shutil.copy(PACKAGING / "main.py", into / "server" / "main.py")
    shutil.copy(PACKAGING / "python-version", into / ".python-version")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, into / name)
    shutil.copytree(
        ROOT / "src" / "hitl_mcp",
        into / "src" / "hitl_mcp",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )


def run(*args: str | Path) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False)
    out = done.stdout + done.stderr
    if done.returncode != 0:
        sys.exit(f"scripts/mcpb.py: {' '.join(map(str, args[:2]))} failed ({done.returncode}):\n{out}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mcpb", default=str(ROOT / "tools" / "node_modules" / ".bin" / "mcpb"))
    parser.add_argument("--out", default=str(ROOT / "dist"))
    args = parser.parse_args()
    mcpb = Path(args.mcpb)
    if not mcpb.exists():
        sys.exit(f"scripts/mcpb.py: no mcpb CLI at {mcpb}: run npm ci --prefix tools (make mcpb does)")

    manifest = json.loads((PACKAGING / "manifest.json").read_text())
    if manifest["version"] != version():
        sys.exit(
            f"scripts/mcpb.py: packaging/mcpb/manifest.json says version {manifest['version']}, "
            f"hitl_mcp.__version__ is {version()}"
        )
    staged = ROOT / "build" / "mcpb"
    stage(staged)
    print(run(mcpb, "validate", staged / "manifest.json").strip())
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    bundle = out / f"hitl-mcp-{version()}.mcpb"
    bundle.unlink(missing_ok=True)
    packed = run(mcpb, "pack", staged, bundle)
    if not bundle.is_file():
        sys.exit(f"scripts/mcpb.py: mcpb pack wrote no {bundle}:\n{packed}")

    check = ROOT / "build" / "mcpb-check"
    shutil.rmtree(check, ignore_errors=True)
    run(mcpb, "unpack", bundle, check)
    print(run(mcpb, "validate", check / "manifest.json").strip())
    missing = [
        p
        for p in ("server/main.py", "pyproject.toml", "src/hitl_mcp/cli/main.py")
        if not (check / p).is_file()
    ]
    if missing:
        sys.exit(f"scripts/mcpb.py: the packed bundle lacks {', '.join(missing)}")
    print(f"{bundle.relative_to(ROOT)}: {bundle.stat().st_size:,} bytes, manifest valid after unpacking")


if __name__ == "__main__":
    main()
