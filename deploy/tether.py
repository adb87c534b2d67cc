"""Tether: run an engine so that it dies with the gateway that started it.

The supervisor stops its engines on every orderly exit. A gateway killed outright (SIGKILL, the
OOM killer) gets no say, and its vLLM and llama.cpp servers would live on, holding the GPU and
the port. Engines are therefore started through this shim: it asks Linux to send it SIGTERM
when its parent dies (`PR_SET_PDEATHSIG`, kept across `exec`), checks the parent is still the
one that started it, and replaces itself with the engine's command. The engine's own SIGTERM
handling then shuts it down as an orderly stop would.

    python -m deploy.tether PARENT_PID -- COMMAND [ARG ...]

The signal follows the parent *thread* that forked: the supervisor spawns from the gateway's
long-lived threads (the event loop's or its executor's), which live as long as the gateway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def tie_to_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask for `sig` when the parent dies; False where the kernel has no such request."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m deploy.tether PARENT_PID -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    parent, command = int(argv[0]), argv[2:]
    tie_to_parent()
    if os.getppid() != parent:  # the parent died before the tie was made
        return 1
    os.execvp(command[0], command)
    return 127  # not reached: exec replaces this process or raises


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
