"""A command's output piped into a reader that stops early (``hitl-mcp history | head -1``, a pager
that quits): the next write fails with ``BrokenPipeError``. That is no failure of the command, so the
CLI ends quietly: :func:`reader_gone` tells it from any other broken pipe, :func:`stopped_reading`
makes the rest of the output go nowhere."""

from __future__ import annotations

import os
import select
import sys
from typing import TextIO


def reader_gone(stream: TextIO) -> bool:
    """Whether ``stream`` is a pipe whose reading end is closed."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or no file behind the stream
        return False


def stopped_reading() -> int:
    """The exit code when the reader of stdout stopped reading: 0, and nothing more is said. stdout
    now goes nowhere, so that the interpreter's last flush is quiet too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0
