"""What confined code may do, built here (in the evaluator) with landlockpy and seccompy.

The child only enforces what it is handed: a Landlock ruleset (a file descriptor) and a seccomp
filter (compiled BPF bytes), so it imports neither package and starts faster.

    Landlock   read (and map executable) only under the interpreter's tree, the shared
               libraries, time zones and a few devices; read and write in the item's temp dir;
               no TCP (ABI 4) or UDP (ABI 8) bind/connect; no signal and no abstract socket out
               of the sandbox's own domain (ABI 6)
    seccomp    EPERM for new processes and threads (fork, vfork, clone; clone3 answers ENOSYS
               so libc falls back to clone), exec, sockets, ptrace and process_vm_*, mount,
               namespaces, kernel modules, kexec, bpf, perf, keyrings, userfaultfd, io_uring,
               open_by_handle_at, signal handlers, signals (where Landlock cannot scope them),
               raising resource limits back, device nodes; the x32 numbers of all of them too.
               Any other architecture's syscall ABI kills the process.
"""

from __future__ import annotations

import errno
import os
import sys
import sysconfig
from functools import cache
from pathlib import Path

import landlockpy
import seccompy
from landlockpy import AccessFS, Ruleset, Scope

DENIED_SYSCALLS = (
    "fork", "vfork", "clone", "execve", "execveat", "socket", "socketpair", "ptrace",
    "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
    "unshare", "setns", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "userfaultfd", "reboot", "swapon", "swapoff", "acct", "open_by_handle_at",
    "name_to_handle_at", "syslog", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "rt_sigaction", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "rt_sigqueueinfo",
    "rt_tgsigqueueinfo", "quotactl", "fanotify_init", "move_pages", "migrate_pages",
    "setrlimit", "prlimit64", "mknod", "mknodat",
)  # fmt: skip
SIGNALS = ("kill", "tkill", "tgkill")  # refused unless Landlock scopes signals (ABI 6)
X32 = 0x40000000  # x86-64's x32 ABI numbers; its own execve/ptrace/... entries are 512-547
X32_OWN = (518, 520, 521, 524, 528, 536, 538, 539, 540, 545)


def ruleset(work: Path) -> Ruleset:
    """The Landlock ruleset for one run in `work`; the caller closes it after the spawn."""
    abi = landlockpy.abi_version()
    read = AccessFS.READ_FILE | AccessFS.EXECUTE
    rules = Ruleset(
        handled_net=landlockpy.net_for_abi(abi),
        scoped=Scope.SIGNAL | Scope.ABSTRACT_UNIX_SOCKET,
    )
    try:
        for path in read_paths():
            if os.path.isdir(path):
                rules.allow_path(path, read | AccessFS.READ_DIR)
            elif os.path.exists(path):
                rules.allow_path(path, read)
        rules.allow_path(work, landlockpy.fs_for_abi(abi))
    except BaseException:
        rules.close()
        raise
    return rules


@cache
def seccomp_program(signals_scoped: bool) -> bytes:
    """The compiled filter (default allow, the calls above refused)."""
    filt = seccompy.Filter()
    denied = DENIED_SYSCALLS if signals_scoped else (*DENIED_SYSCALLS, *SIGNALS)
    for call in denied:
        filt.errno(call, errno.EPERM)
    filt.errno("clone3", errno.ENOSYS)
    if seccompy.arch() == "x86_64":
        for call in denied:
            filt.errno(X32 | seccompy.syscall_nr(call), errno.EPERM)
        filt.errno(X32 | seccompy.syscall_nr("clone3"), errno.ENOSYS)
        for number in X32_OWN:
            filt.errno(X32 | number, errno.EPERM)
    return filt.program


@cache
def read_paths() -> tuple[str, ...]:
    """What the child may read besides its temp dir: the interpreter's own tree, the shared
    libraries, time zones, a few devices. Not the evaluator's tree, not the home directory,
    not /etc (past the loader's cache), not /proc."""
    paths = {
        sys.base_prefix,
        str(Path(sys.executable).resolve().parent.parent),
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["platstdlib"],
        "/lib",
        "/lib64",
        "/usr/lib",
        "/usr/lib64",
        "/usr/share/zoneinfo",
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/dev/null",
        "/dev/zero",
        "/dev/urandom",
    }
    return tuple(sorted(paths))
