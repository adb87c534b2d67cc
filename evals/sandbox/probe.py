"""Which isolation the sandbox has on this machine: probed once, chosen, reported, or refused.

The layers (asked of the kernel here; then `evals.sandbox.mechanism()` runs one confined child
that must come back with its proof before any code item is run):

    landlock   the kernel LSM (5.13+): reads only under the interpreter's directories and the
               item's temp dir, writes only in the temp dir; TCP (ABI 4) and UDP (ABI 8)
               refused; signals and abstract sockets kept inside (ABI 6)
    seccomp    a syscall filter: no fork / clone / exec, no socket, no ptrace, mount, namespaces,
               kernel modules, io_uring, signal handlers, signals to other processes, rlimits
    netns      a new, empty network namespace (`unshare --net`, or with `--map-root-user`
               where only a user namespace is allowed): a second wall for the network

The chain: landlock AND seccomp are required (between them they hold the filesystem, the
network and new processes); netns is added where the kernel allows it. Without landlock or
seccomp, code is not run: `refused` says why, and every code item is recorded as refused
(an `error` of class `sandbox_refused`), never as right or wrong.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Mechanism:
    landlock_abi: int  # 0: none
    seccomp: bool
    netns_prefix: tuple[str, ...]  # empty: no network namespace
    packages: bool = True  # landlockpy and seccompy importable

    @property
    def refused(self) -> str | None:
        """Why code cannot run here, or None when it can."""
        if not self.packages:
            return (
                "sandbox refused: the landlockpy and seccompy packages are not installed "
                "(pip install 'plumbline[evals]')"
            )
        missing = []
        if not self.landlock_abi:
            missing.append("Landlock (kernel 5.13+ with landlock in the LSM list)")
        if not self.seccomp:
            missing.append("seccomp filters")
        if not missing:
            return None
        return "sandbox refused: no " + " and no ".join(missing) + " on this machine"

    @property
    def name(self) -> str:
        """What code runs under, e.g. 'landlock(abi 7)+seccomp+netns'."""
        if self.refused:
            return "refused"
        return f"landlock(abi {self.landlock_abi})+seccomp" + (
            "+netns" if self.netns_prefix else ""
        )


def packages_installed() -> bool:
    return all(importlib.util.find_spec(name) for name in ("landlockpy", "seccompy"))


def landlock_abi() -> int:
    try:
        import landlockpy

        return landlockpy.abi_version()
    except (ImportError, OSError):
        return 0


def seccomp_available() -> bool:
    try:
        import seccompy

        return seccompy.supported()
    except (ImportError, OSError):
        return False


def netns_prefix() -> tuple[str, ...]:
    unshare = shutil.which("unshare")
    if not unshare:
        return ()
    for flags in (("--net",), ("--net", "--map-root-user")):
        prefix = (unshare, *flags)
        try:
            probe = subprocess.run(
                [*prefix, sys.executable, "-I", "-S", "-c", "pass"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return ()


@cache
def chosen() -> Mechanism:
    """The mechanism for this process's lifetime, probed on first use and logged once."""
    mechanism = Mechanism(
        landlock_abi(), seccomp_available(), netns_prefix(), packages=packages_installed()
    )
    if mechanism.refused:
        log.warning("code sandbox: %s; code items will be refused", mechanism.refused)
    else:
        log.info("code sandbox: %s", mechanism.name)
    return mechanism
