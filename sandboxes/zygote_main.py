"""The Python zygote: runs INSIDE a process-backend sandbox as the PID namespace's pid 1.

Standalone (stdlib only); the host starts it as ``python -I -S -c <this file> KEEP`` (KEEP: a
JSON list of binds under /tmp or /dev/shm that the scrub must spare) under the sandbox's
uid, limits and namespaces, and keeps it for many runs. It imports nothing of any user;
per run it forks one child that applies the run's limits and runs the code.
See sandboxes/README.md ("Python zygote") for the threat model.

Control channel: fd 0 is a Unix stream socket to the host. Every message is an 8-byte
big-endian length and a JSON body. A ``run`` request carries three fds (SCM_RIGHTS): the
child's stdin, stdout and stderr pipes, so program output goes straight to the host and
never through the zygote. Requests: ``{"op": "run", ...}``, ``{"op": "kill"}`` (during a
run). Replies: ``{"ready": true}`` once, then one ``{"status", "cpu_s"}`` per run.

After every run the zygote (pid 1: the only process that ``kill(-1)`` spares) kills every
other process of the namespace, reaps them, and removes what a run may leave behind
outside the workspace: files in /tmp and /dev/shm, SysV IPC objects. POSIX message queues
are refused by RLIMIT_MSGQUEUE=0 in the child.
"""

import ctypes
import json
import os
import resource
import select
import shutil
import signal
import site
import socket
import struct
import sys

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_DUMPABLE = 4
_IPC_RMID = 0
_HEADER = struct.Struct(">Q")
_SCRUB_DIRS = ("/tmp", "/dev/shm")


def _setup():
    # Non-dumpable: a same-uid child cannot ptrace us or open /proc/1/{mem,fd,environ}.
    _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    # As a namespace init we receive only signals we handle; Python handles SIGINT: drop it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # -S skipped site: add site-packages (no .pth execution) and exit()/quit() builtins. In a
    # venv, site is also what makes sys.prefix the venv (pyvenv.cfg): do that part here too,
    # or the venv's own packages would be missing from every run.
    for path in site.getsitepackages(_venv_prefixes()):
        if os.path.isdir(path) and path not in sys.path:
            sys.path.append(path)
    site.setquit()
    # Stdlib modules every run needs (running a script, exit handling, tracebacks): imported
    # once here instead of in every child. Nothing of any user's is imported.
    import atexit  # noqa: F401
    import runpy  # noqa: F401
    import traceback  # noqa: F401
    import types  # noqa: F401


def _venv_prefixes():
    """Like site.venv(): a pyvenv.cfg beside the executable or one folder up makes that folder
    sys.prefix; the base installation's packages count only with include-system-site-packages."""
    exe_dir = os.path.dirname(sys.executable)
    for folder in (exe_dir, os.path.dirname(exe_dir)):
        try:
            with open(os.path.join(folder, "pyvenv.cfg"), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        settings = {k.strip().lower(): v.strip().lower() for k, _, v in (ln.partition("=") for ln in lines)}
        sys.prefix = sys.exec_prefix = folder
        return [folder] + ([sys.base_prefix] if settings.get("include-system-site-packages") == "true" else [])
    return None


def _recv_exact(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(sock):
    """One message and the fds sent with it; (None, []) at EOF."""
    head, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, 8)
    if not head:
        return None, fds
    if len(head) < _HEADER.size:
        rest = _recv_exact(sock, _HEADER.size - len(head))
        if rest is None:
            return None, fds
        head += rest
    body = _recv_exact(sock, _HEADER.unpack(head)[0])
    return (json.loads(body) if body is not None else None), fds


def _send(sock, obj):
    body = json.dumps(obj).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def _child(job, fds):
    """Runs in the forked child; never returns."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # the program's own /proc/self works normally
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # (soft, hard) per rlimit, already clamped by the host to what the zygote inherited.
        wanted = [("core", (0, 0)), ("msgqueue", (0, 0))] + [(n, tuple(v)) for n, v in job["limits"].items()]
        for name, value in wanted:
            res = getattr(resource, "RLIMIT_" + name.upper())
            hard = resource.getrlimit(res)[1]
            if hard != resource.RLIM_INFINITY:  # never above the zygote's own ceiling
                value = (min(value[0], hard), min(value[1], hard))
            resource.setrlimit(res, value)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        # Fresh std streams over the run's pipes, buffered as `python -I` buffers them
        # (-I ignores PYTHONUNBUFFERED): stdout by blocks, stderr by lines.
        sys.stdin = sys.__stdin__ = open(0, "r", closefd=False, encoding="utf-8", errors="strict")
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False, encoding="utf-8", errors="strict")
        sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, encoding="utf-8",
                                           errors="backslashreplace", buffering=1)
        code = _run_program(job)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - like the interpreter: traceback, status 1
        try:
            _print_user_traceback()
        except BaseException:  # noqa: BLE001
            pass
        code = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - the interpreter exits 120 when stdout cannot flush
            code = code or 120
    os._exit(code)


def _print_user_traceback():
    """The traceback as ``python prog.py`` prints it: without the zygote's and runpy's frames."""
    import runpy
    import traceback
    etype, exc, tb = sys.exc_info()
    ours = (globals(), vars(runpy))
    while tb is not None and any(tb.tb_frame.f_globals is g for g in ours):
        tb = tb.tb_next
    traceback.print_exception(etype, exc, tb)


def _exit_code(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        pass
    return 1


def _run_program(job):
    import types
    sys.argv = [job["path"] if job.get("path") is not None else "-c", *job["args"]]
    # Isolated mode (-I): neither the script's directory nor '' goes on sys.path.
    if job.get("path") is not None:
        import runpy
        runpy.run_path(job["path"], run_name="__main__")
        return 0
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    exec(compile(job["code"], "<string>", "exec"), module.__dict__)
    return 0


def _reap_nohang(child, state):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == child:
            state["status"] = status


def _kill_all_and_reap(child, state):
    try:
        os.kill(-1, signal.SIGKILL)  # every process of the namespace but pid 1 (us)
    except ProcessLookupError:
        pass
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        if pid == child and state.get("status") is None:
            state["status"] = status


def _scrub(keep):
    """Remove what runs left in /tmp and /dev/shm, but the binds in ``keep`` (an interpreter
    under the host's /tmp is mounted there) and the directories leading to them."""
    on_the_way = set()
    for path in keep:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            on_the_way.add(parent)
            parent = os.path.dirname(parent)
    for top in _SCRUB_DIRS:
        _scrub_dir(top, keep, on_the_way)
    _scrub_ipc()


def _scrub_dir(top, keep, on_the_way):
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        if entry.path in keep:
            continue
        try:
            if entry.path in on_the_way and entry.is_dir(follow_symlinks=False):
                _scrub_dir(entry.path, keep, on_the_way)
            elif entry.is_dir(follow_symlinks=False):
                _rmtree_forced(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def _scrub_ipc():
    for kind, ctl, args in (("shm", "shmctl", (_IPC_RMID, None)), ("sem", "semctl", (0, _IPC_RMID)),
                            ("msg", "msgctl", (_IPC_RMID, None))):
        try:
            with open("/proc/sysvipc/" + kind) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].isdigit():
                getattr(_libc, ctl)(int(fields[1]), *args)


def _rmtree_forced(path):
    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    shutil.rmtree(path, onerror=fix)


def _serve_run(sock, job, fds, keep):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = os.fork()
    if child == 0:
        _child(job, fds)
    for fd in fds:
        os.close(fd)
    state = {"status": None}
    pidfd = os.pidfd_open(child)
    hangup = False
    try:
        while state["status"] is None:
            ready, _, _ = select.select([sock, pidfd], [], [], 0.2)
            if sock in ready:
                msg, extra = _recv(sock)
                for fd in extra:
                    os.close(fd)
                if msg is None:
                    hangup = True
                    break
                if msg.get("op") == "kill":
                    try:
                        os.kill(-1, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            _reap_nohang(child, state)  # also reaps orphans re-parented to us meanwhile
    finally:
        os.close(pidfd)
    _kill_all_and_reap(child, state)
    if hangup:
        sys.exit(0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    _scrub(keep)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    _send(sock, {"status": state["status"], "cpu_s": round(cpu, 6)})


def main():
    keep = frozenset(json.loads(sys.argv[1])) if len(sys.argv) > 1 else frozenset()
    _setup()
    sock = socket.socket(fileno=0)
    _send(sock, {"ready": True, "pid": os.getpid()})
    while True:
        msg, fds = _recv(sock)
        if msg is None:
            return
        if msg.get("op") != "run" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        _serve_run(sock, msg, fds, keep)


main()
