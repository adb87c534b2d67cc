"""The sandbox's child: confine this interpreter, run the untrusted code, prove the tests ran.

Run as a script (`python -I -S -B child.py CONFIG`) in the item's temporary directory, never
imported by the evaluator. In order:

1. resource limits, soft = hard (seccomp then refuses setrlimit, so they stay);
2. confinement, as built by the evaluator (evals/sandbox/policy.py): no_new_privs, the Landlock
   ruleset handed over as a descriptor, the compiled seccomp filter;
3. the harness (closures over references taken before the code under test runs);
4. the audit hook, which reads the proof nonce from its pipe into its own closure (the nonce
   is in no file, argument, environment variable or reachable object) and refuses gc and
   ctypes (which could find it), tracing, and the events the kernel refuses anyway;
5. the code runs; only if it returns normally (mode "program") or the dataset's `check`
   returns on the guarded candidate (mode "check") does `main` raise the proof event, on which
   the hook writes the nonce to the proof pipe and exits.

An exit of any kind (sys.exit, os._exit, SystemExit, a signal) leaves the proof pipe empty.
"""

from __future__ import annotations

import builtins
import os
import resource
import sys

# No json, typing or contextlib here: the child imports only what it needs (startup is the
# sandbox's cost per item). Annotations are strings, read by mypy alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PLAIN = (bool, int, float, complex, str, bytes, type(None), list, tuple, dict, set, frozenset)
PROOF_EVENT = "plumbline.sandbox.proof"
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SYS_LANDLOCK_RESTRICT_SELF = 446  # the same number on every architecture
# Refused by the audit hook. The kernel layers hold the filesystem, network and processes on
# their own; these refusals give a clear message first, and keep the code under test from
# reading the interpreter's memory (gc, ctypes) or rewinding the harness (tracing).
DENIED_EVENTS = (
    "sys.settrace",
    "sys.setprofile",
    "sys.addaudithook",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "ctypes.",
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "subprocess.Popen",
    "pty.spawn",
    "socket.",
)


def main() -> None:
    config = _config(sys.argv[1])
    for name, value in config.items():
        if name.startswith("RLIMIT_"):
            resource.setrlimit(getattr(resource, name), (int(value), int(value)))
    with open("filter.bpf", "rb") as f:
        bpf = f.read()
    _confine(int(config["landlock_fd"]), bpf)
    run, audit, proof_event = (
        _runner(config["mode"], config.get("entry_point", "")),
        sys.audit,
        PROOF_EVENT,
    )
    _audit_hook(config, sys._getframe())
    # Nothing of the harness stays reachable from `import __main__`: what runs from here on
    # holds its own references (closures), taken before the code under test can touch them.
    namespace = globals()
    for name in [name for name in namespace if not name.startswith("__")]:
        del namespace[name]
    del namespace
    run()
    audit(proof_event)  # reached only when the code (or check) returned normally


def _config(path: str) -> dict[str, str]:
    """`key=value` lines, written by the evaluator (evals/sandbox/__init__.py)."""
    with open(path, encoding="utf-8") as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def _read_nonce(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 64):
        data += chunk
    os.close(fd)
    return data


def _confine(landlock_fd: int, bpf: bytes) -> None:
    """Enforce what the evaluator built (evals/sandbox/policy.py): no new privileges, then the
    Landlock ruleset handed over as a descriptor, then the compiled seccomp filter."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"sandbox: {what} failed: {os.strerror(code)}")

    class Program(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    check(libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, landlock_fd, 0), "landlock_restrict_self")
    os.close(landlock_fd)
    code = ctypes.create_string_buffer(bpf, len(bpf))
    program = Program(len(bpf) // 8, ctypes.cast(code, ctypes.c_void_p))
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0), "seccomp")


def _audit_hook(config: dict[str, str], main_frame: object) -> None:
    """The proof lives here and nowhere else: the nonce is read from its pipe into this hook's
    closure (audit hooks cannot be listed, and gc and ctypes are refused), and written to the
    proof pipe only on the proof event raised from `main`'s own frame, which is past the end of
    the code under test. The same hook refuses DENIED_EVENTS (unless a test turns that off)."""
    nonce = _read_nonce(int(config["nonce_fd"]))
    proof_fd, deny = int(config["proof_fd"]), config.get("audit_hook", "1") == "1"
    flushes = (sys.stdout.flush, sys.stderr.flush)
    write, exit_now, frame_of = os.write, os._exit, sys._getframe

    def hook(
        event: str,
        args: object,
        denied: tuple[str, ...] = DENIED_EVENTS,
        proof_event: str = PROOF_EVENT,
        refusal: type[PermissionError] = PermissionError,
    ) -> None:
        if event == proof_event:
            if frame_of(1) is not main_frame:
                raise refusal("sandbox: the proof is the harness's to give")
            for flush in flushes:
                try:  # noqa: SIM105 (contextlib is not imported here)
                    flush()
                except (OSError, ValueError):  # the code closed or broke its own output
                    pass
            write(proof_fd, nonce)
            exit_now(0)
        if deny and event.startswith(denied):
            raise refusal(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


# The harness's references, taken when this file is loaded (before any code under test runs) and
# bound as default arguments: nothing the code rebinds in builtins or in modules reaches them.
KEPT_BUILTINS = dict(builtins.__dict__)


def _restorer(
    modules: dict[str, Any] = sys.modules,
    builtin_dict: dict[str, Any] = builtins.__dict__,
    kept: dict[str, Any] = KEPT_BUILTINS,
    dict_: type[dict[str, Any]] = dict,
    vars_: Callable[[Any], dict[str, Any]] = vars,
    len_: Callable[[Any], int] = len,
    list_: type[list[Any]] = list,
    object_: type[object] = object,
) -> tuple[Callable[..., Any], Callable[[Any], None]]:
    missing = object_()

    def snapshot(*namespaces: dict[str, Any]) -> Any:
        saved = {name: (mod, dict_(vars_(mod))) for name, mod in list_(modules.items())}
        return saved, [(space, dict_(space)) for space in namespaces]

    def put_back(current: dict[str, Any], saved: dict[str, Any], taken: list[Any]) -> None:
        changed = len_(current) != len_(saved)
        for key, value in saved.items():
            changed = changed or current.get(key, missing) is not value
        if changed:
            taken.append(dict_(current))
            current.clear()
            current.update(saved)

    def restore(saved: Any) -> None:
        # Drop modules imported since (the tests import fresh ones) and put back every module
        # dict and namespace that changed; what is taken out stays alive until the end, so no
        # finalizer of the model's runs half-way.
        saved_modules, namespaces = saved
        taken = [modules.pop(name) for name in list_(modules) if name not in saved_modules]
        for name, (mod, saved_dict) in saved_modules.items():
            modules[name] = mod
            put_back(vars_(mod), saved_dict, taken)
        for space, saved_dict in namespaces:
            put_back(space, saved_dict, taken)
        builtin_dict.update(kept)
        taken.clear()

    return snapshot, restore


def _guard(
    restore: Callable[[Any], None],
    kinds: tuple[type, ...] = PLAIN,
    containers: tuple[type, ...] = (list, tuple, set, frozenset),
    type_: type[type] = type,
    id_: Callable[[object], int] = id,
    set_: type[set[int]] = set,
    dict_: type[dict[Any, Any]] = dict,
    TypeError: type[TypeError] = TypeError,
) -> Callable[[Callable[..., Any], Any], Callable[..., Any]]:
    """The candidate, put behind a check that what it returns is made of plain built-in values
    only (exact types: an object whose `__eq__` always answers True is refused), with the
    stdlib put back after every call."""

    def plain(value: object) -> None:
        stack, seen = [value], set_()
        while stack:
            item = stack.pop()
            kind = type_(item)
            if not [k for k in kinds if kind is k]:
                raise TypeError(f"sandbox: the answer returned a {kind.__name__!r} value")
            if kind is dict_:
                stack.extend(dict_.items(item))  # type: ignore[arg-type]
            elif [k for k in containers if kind is k] and id_(item) not in seen:
                seen.add(id_(item))
                stack.extend(item)  # type: ignore[arg-type]

    def guarded(candidate: Callable[..., Any], saved: list[Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = candidate(*args, **kwargs)
            finally:
                restore(saved[0])
            plain(result)
            return result

        return call

    return guarded


def _runner(
    mode: str,
    entry_point: str,
    exec_: Callable[..., None] = exec,
    compile_: Callable[..., Any] = compile,
    open_: Callable[..., Any] = open,
    callable_: Callable[[object], bool] = callable,
    NameError: type[NameError] = NameError,
    kept: dict[str, Any] = KEPT_BUILTINS,
) -> Callable[[], None]:
    snapshot, restore = _restorer()
    guarded = _guard(restore)

    def source(name: str) -> Any:
        with open_(name, encoding="utf-8") as f:
            return compile_(f.read(), name, "exec")

    def run_program() -> None:
        exec_(source("program.py"), {"__name__": "__main__"})

    def run_check() -> None:
        # The model's code in one namespace, the dataset's `check` in another with builtins of
        # its own (the entry point's name there is the guarded candidate).
        before_model = snapshot()
        model: dict[str, Any] = {"__name__": "__main__"}
        exec_(source("program.py"), model)
        candidate: Any = model.get(entry_point)
        if not callable_(candidate):
            raise NameError(f"sandbox: the answer defines no function {entry_point!r}")
        restore(before_model)
        tests: dict[str, Any] = {"__name__": "__check__", "__builtins__": {**kept}}
        exec_(source("tests.py"), tests)
        check: Any = tests.get("check")
        if not callable_(check):
            raise NameError("sandbox: the tests define no check()")
        # What the candidate may reach of check's namespace is put back too.
        saved: list[Any] = []
        tests[entry_point] = call = guarded(candidate, saved)
        saved.append(snapshot(tests, tests["__builtins__"]))
        check(call)

    return run_program if mode == "program" else run_check


if __name__ == "__main__":
    main()
