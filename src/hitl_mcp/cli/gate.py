"""The ``proxy`` and ``hook`` verbs' arguments. Light on purpose: ``cli.py`` imports this to build its
parser, and the modules that do the work load only when a verb runs."""

from __future__ import annotations

import argparse

HOSTS = ("claude-code", "codex", "gemini-cli")


def add_proxy(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", required=True, help="the policy file (gate.yaml): rules and default")
    p.add_argument("--server-config", help="the hitl-mcp config: channels, state dir (default: embedded)")
    p.add_argument("--state-dir", help="where the database lives (default ~/.local/state/hitl-mcp)")
    p.add_argument("--upstream", metavar="URL", help="a streamable HTTP upstream, instead of a command")
    p.add_argument(
        "--call-timeout", type=float, default=600.0, help="seconds an upstream call may take (default 600)"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the upstream's command and arguments")


def add_hook(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", choices=HOSTS, help="whose hook event is on stdin")
    p.add_argument("--config", "-c", required=True, help="the policy file (gate.yaml): rules and default")
    p.add_argument("--server-config", help="the hitl-mcp config: where the server listens, its state dir")
    p.add_argument("--state-dir", help="where the web token file is (default ~/.local/state/hitl-mcp)")
    p.add_argument("--url", help="the running server's base URL (default: from the server config)")
    p.add_argument(
        "--timeout",
        type=float,
        default=55.0,
        help="seconds to wait for the person; keep it under the hook's own timeout (default 55)",
    )
    p.add_argument(
        "--on-failure",
        choices=["deny", "ask"],
        default="deny",
        help="no server, no answer in time: deny (default), or ask, the host's own prompt",
    )


def cmd_proxy(args: argparse.Namespace) -> int:
    from hitl_mcp.gate.run import cmd_proxy as run

    return run(args)


def cmd_hook(args: argparse.Namespace) -> int:
    from hitl_mcp.gate.hook import cmd_hook as run

    return int(run(args))
