"""Test harness that runs INSIDE the sandbox: one exec runs every test of one submission.

Standalone (stdlib only, no verigym imports): the server passes this file's source to the
sandbox's Python with ``-c``. It is the only trusted code in the sandbox, so the design
assumes the program it runs is hostile.

Protocol
  stdin : 32 bytes of per-run token (hex), then a JSON job:
          {"code", "fn_name", "inputs": [...], "timeout_s", "memory_mb",
           "output_limit_bytes", "stop_on_failure"}
  stdout: one record per line, ``<token> <json>``: first {"compile": "ok"|"error", ...},
          then one {"test": i, ...} per test run, finally {"done": n}.

Why the program cannot fake a pass
  * The harness never judges outputs: it reports raw stdout / return values and the server
    compares them with expected outputs that never enter the sandbox. To "pass" a test a
    program has to print the right answer, i.e. solve it.
  * Each test runs in a forked child whose fds 0/1/2 are files and whose every other fd is
    closed, so the child holds no handle on the harness's stdout (the result channel).
  * The harness makes itself non-dumpable (PR_SET_DUMPABLE 0): a same-uid process without
    CAP_SYS_PTRACE can then not open /proc/<harness>/fd/1, /proc/<harness>/mem or environ.
  * Defense in depth: the server accepts only lines that start with the token. The token
    lives in one bytearray, read with readv and written with writev (never copied into a
    str/bytes), and the forked child zeroes it before running any user code.
  * Exit codes only ever turn a test into a failure (RE/MLE/OLE), never into a pass.
  * After every test all descendants are killed: the harness is a child subreaper, so
    double-forked daemons reparent to it and are found by their ppid in /proc.
If the program kills the harness itself (``kill -9 -1``), the record stream just stops and
the server scores the unreported tests as failed.
"""

import builtins
import ctypes
import json
import math
import os
import resource
import select
import signal
import sys
import threading
import time
import traceback

EXIT_MEMORY = 96   # MemoryError in the program
EXIT_OUTPUT = 97   # the program hit the output-size limit (EFBIG)
STDERR_TAIL = 2000
TOKEN = bytearray(32)
_libc = ctypes.CDLL(None, use_errno=True)


def _read_job():
    got = os.readv(0, [TOKEN])
    while got < len(TOKEN):
        view = memoryview(TOKEN)[got:]
        n = os.readv(0, [view])
        if n == 0:
            raise SystemExit("harness: short token")
        got += n
    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    return json.loads(b"".join(chunks))


def emit(record):
    data = b" " + json.dumps(record).encode() + b"\n"
    parts = [TOKEN, data]
    while parts:
        n = os.writev(1, parts)
        while parts and n >= len(parts[0]):
            n -= len(parts[0])
            parts.pop(0)
        if parts and n:
            parts[0] = memoryview(parts[0])[n:]


def _descendants_reaped():
    """Kill and reap every process whose parent is this harness, until none is left."""
    me = os.getpid()
    for _ in range(10000):
        kids = []
        try:
            names = os.listdir("/proc")
        except OSError:
            names = []
        for name in names:
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    stat = f.read()
                if int(stat.rsplit(b")", 1)[1].split()[1]) == me:
                    kids.append(int(name))
            except (OSError, ValueError, IndexError):
                continue
        while True:  # reap whatever already died (zombies also show up with our ppid)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        if not kids:
            return
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _child(code, fn_name, args, paths, job):
    """Runs in the forked child: become the program. Never returns."""
    for i in range(len(TOKEN)):
        TOKEN[i] = 0
    try:
        # The fork inherited the harness's non-dumpable flag; give the program its own
        # /proc/self back (the harness stays closed to it).
        _libc.prctl(4, 1, 0, 0, 0)
        os.setsid()
        fds = [os.open(paths["in"], os.O_RDONLY),
               os.open(paths["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
               os.open(paths["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
               os.open(paths["ret"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)]
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(len(fds), 1 << 16)
        cpu = int(math.ceil(job["timeout_s"])) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        limit = job["memory_mb"] << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        out_cap = job["output_limit_bytes"]
        resource.setrlimit(resource.RLIMIT_FSIZE, (out_cap, out_cap))
        import io
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8",
                                     errors="replace")
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16),
                                      encoding="utf-8", errors="replace")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace",
                                      write_through=True)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        sys.argv = ["solution.py"]
    except BaseException:
        os._exit(120)
    status = 0
    try:
        scope = {"__name__": "__main__" if fn_name is None else "solution", "__builtins__": builtins}
        exec(code, scope)
        if fn_name is not None:
            target = None
            cls = scope.get("Solution")
            if isinstance(cls, type) and hasattr(cls, fn_name):
                target = getattr(cls(), fn_name)
            elif callable(scope.get(fn_name)):
                target = scope[fn_name]
            if target is None:
                raise NameError("no function %r (class Solution method or top-level) in the program" % fn_name)
            value = target(*args)
            if isinstance(value, tuple):
                value = list(value)
            os.write(3, json.dumps(value).encode())
        for thread in threading.enumerate():  # the interpreter would wait for these at exit
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except MemoryError:
        status = EXIT_MEMORY
    except BaseException as exc:
        if isinstance(exc, OSError) and exc.errno == 27:  # EFBIG: RLIMIT_FSIZE (Python ignores SIGXFSZ)
            status = EXIT_OUTPUT
        else:
            status = 1
            try:
                traceback.print_exc()
            except BaseException:
                pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        try:
            stream.flush()
        except MemoryError:
            status = status or EXIT_MEMORY
        except OSError as exc:
            status = status or (EXIT_OUTPUT if exc.errno == 27 else 1)
        except BaseException:
            status = status or 1
    os._exit(status & 0xFF)


def _wait(pid, timeout_s):
    """(wait status, timed_out, rusage) with a wall-clock deadline and no signals."""
    timed_out = False
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(max(1, int(timeout_s * 1000))):
            timed_out = True
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except OSError:
                    pass
    finally:
        os.close(pidfd)
    _, status, usage = os.wait4(pid, 0)
    return status, timed_out, usage


def _read(path, limit):
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
        return data, os.path.getsize(path)
    except OSError:
        return b"", 0


def run_test(index, code, job, test_input):
    paths = {k: os.path.join(job["workdir"], "t_" + k) for k in ("in", "out", "err", "ret")}
    fn_name = job.get("fn_name")
    args = None
    if fn_name is not None:
        try:
            args = [json.loads(line) for line in test_input.split("\n") if line.strip()]
        except ValueError as exc:
            return {"test": index, "bad_input": "input line is not JSON: %s" % exc}
        test_input = ""
    with open(paths["in"], "wb") as f:
        f.write(test_input.encode("utf-8"))
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(code, fn_name, args, paths, job)
    status, timed_out, usage = _wait(pid, job["timeout_s"])
    wall = time.monotonic() - start
    _descendants_reaped()
    cap = job["output_limit_bytes"]
    clean = not timed_out and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    out, out_size = _read(paths["out"], cap)
    err, _ = _read(paths["err"], 1 << 16)
    ret, ret_size = _read(paths["ret"], cap)
    return {
        "test": index, "timed_out": timed_out, "wall_s": round(wall, 4),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 4), "maxrss_kb": usage.ru_maxrss,
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        # A failed run's output is never compared: send a snippet, not up to the cap.
        "stdout": out[:cap if clean else 1000].decode("utf-8", "replace"), "stdout_bytes": out_size,
        "result": ret[:cap].decode("utf-8", "replace") if fn_name is not None else None,
        "result_bytes": ret_size, "stderr_tail": err[-STDERR_TAIL:].decode("utf-8", "replace"),
    }


def main():
    job = _read_job()
    _libc.prctl(4, 0, 0, 0, 0)    # PR_SET_DUMPABLE = 0: /proc/<harness>/* closed to the program
    _libc.prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER: orphans of the program come back to us
    job.setdefault("workdir", os.getcwd())
    try:
        code = compile(job["code"], "solution.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        emit({"compile": "error", "detail": "".join(traceback.format_exception_only(type(exc), exc))[-4000:]})
        emit({"done": 0})
        return
    emit({"compile": "ok"})
    ran = 0
    for index, test_input in enumerate(job["inputs"]):
        record = run_test(index, code, job, test_input)
        emit(record)
        ran += 1
        failed = "bad_input" in record or record["timed_out"] or record["signal"] is not None or record["exit"] != 0
        if failed and job["stop_on_failure"]:
            break
    emit({"done": ran})


main()
