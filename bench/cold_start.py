"""Cold start: spawn the server over stdio, until `initialize` and then `tools/list` are answered.

Runs hitl-mcp and the MCP reference server `mcp-server-time` alternately, the same way, with the
same raw JSON-RPC client (no SDK in the measured path), and reports the median of each and their
ratio. The reference server lives in its own venv (`.venv-bench`, made on first use), because it
must not change this project's dependencies.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_VENV = ROOT / ".venv-bench"
GOAL_RATIO = 1.0

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


def reference_command() -> list[str]:
    beside = Path(sys.executable).parent / "mcp-server-time"  # the test extras install it (pinned)
    found = str(beside) if beside.exists() else shutil.which("mcp-server-time")
    if found:
        return [found]
    exe = BENCH_VENV / "bin" / "mcp-server-time"
    if not exe.exists():
        print("creating .venv-bench with mcp-server-time ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        pip = [str(BENCH_VENV / "bin" / "pip"), "install", "-q", "mcp-server-time"]
        subprocess.run(pip, check=True, stderr=subprocess.DEVNULL)
    return [str(exe)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Milliseconds from spawn to the initialize answer, and to the tools/list answer."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        assert answer.get("id") == 1 and "result" in answer, answer
        initialized = time.perf_counter()
        process.stdin.write((json.dumps(INITIALIZED) + "\n" + json.dumps(TOOLS_LIST) + "\n").encode())
        process.stdin.flush()
        while True:
            message = json.loads(process.stdout.readline())
            if message.get("id") == 2:
                assert message["result"]["tools"], message
                break
        listed = time.perf_counter()
    finally:
        process.kill()
        process.wait()
    return (initialized - started) * 1000, (listed - started) * 1000


def compile_ours() -> None:
    """Our bytecode, compiled as installing the package compiles it (the reference's was, by pip). The
    warm-up run would write it too, but not under PYTHONDONTWRITEBYTECODE: then a checkout compiles
    every module from source on every start, some 90 ms that no installed server spends."""
    spec = importlib.util.find_spec("hitl_mcp")
    if spec is not None and spec.origin is not None:
        compileall.compile_dir(Path(spec.origin).parent, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    reference = reference_command()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "hitl.yaml"
        config.write_text(f"server: {{http: {{host: 127.0.0.1, port: {free_port()}}}}}\n")
        env = {**os.environ, "HITL_STATE_DIR": str(Path(tmp) / "state")}
        ours_command = [str(Path(sys.executable).parent / "hitl-mcp"), "serve", "--config", str(config)]
        ours: list[tuple[float, float]] = []
        theirs: list[tuple[float, float]] = []
        compile_ours()
        one_run(ours_command, env)  # warm the page cache and compile bytecode once for each
        one_run(reference, env)
        for _ in range(args.runs):
            ours.append(one_run(ours_command, env))
            theirs.append(one_run(reference, env))
    ours_init, ours_list = (statistics.median(x) for x in zip(*ours, strict=True))
    ref_init, ref_list = (statistics.median(x) for x in zip(*theirs, strict=True))
    print(f"{'server':<18} {'initialize_ms':>14} {'tools_list_ms':>14}   (median of {args.runs})")
    print(f"{'hitl-mcp':<18} {ours_init:>14.1f} {ours_list:>14.1f}")
    print(f"{'mcp-server-time':<18} {ref_init:>14.1f} {ref_list:>14.1f}")
    print(f"ratio (tools/list): {ours_list / ref_list:.2f}, goal <= {GOAL_RATIO}")
    print(
        json.dumps(
            {
                "bench": "cold_start",
                "ours_ms": round(ours_list, 1),
                "reference_ms": round(ref_list, 1),
                "ratio": round(ours_list / ref_list, 3),
                "ours_initialize_ms": round(ours_init, 1),
                "reference_initialize_ms": round(ref_init, 1),
                "runs": args.runs,
                "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
            }
        )
    )


if __name__ == "__main__":
    main()
