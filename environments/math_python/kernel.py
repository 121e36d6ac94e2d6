"""Notebook kernel, executed INSIDE the session sandbox (stdlib only, run with ``-c``).

Two modes, chosen by the server (see the README, "How state persists"):

``--repl`` (persistent kernel, the default where the backend has long-lived processes):
  the process lives for the whole session. Its stdin carries one JSON request per line:
  ``{"cell": str, "marker": str}`` runs a cell with output going to the real stdout/stderr
  (a final bare expression is echoed with ``repr``, like a notebook); ``{"replay": [cell,
  ...], "marker": str}`` re-runs earlier cells silently (after a restart). When a request
  is done the kernel writes ``marker + status + "\n"`` to fd 1 and ``marker`` to fd 2
  (status 0 = ran, 1 = raised: traceback on stderr). Cells get an empty stdin (the request
  channel is a private fd), so ``input()`` cannot eat the next request. At start it writes
  ``READY`` to fd 1. A cell that ends the process (``os._exit``, a signal) ends the kernel:
  the server sees EOF instead of the marker and restarts it.

replay (one exec per call): stdin is JSON ``{"history": [cell, ...], "cell": str, "marker":
  str}``; every earlier cell is re-run first with output discarded and exceptions
  swallowed, then the new cell runs. After the new cell the kernel writes ``marker`` to fd
  2 and leaves with ``os._exit`` (no atexit hooks of the cell), so the server can tell
  "ran" from "took the process down" and keeps only cells that ran in the history.
  Exit status: 0 = the cell ran, 1 = it raised (traceback on stderr).
"""

import ast
import io
import json
import os
import sys
import traceback


def _compile_cell(source):
    tree = ast.parse(source, "<cell>", "exec")
    tail = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        tail = compile(ast.Expression(tree.body.pop().value), "<cell>", "eval")
    return compile(tree, "<cell>", "exec"), tail


def _run(source, scope, echo):
    body, tail = _compile_cell(source)
    exec(body, scope)
    if tail is not None:
        value = eval(tail, scope)
        if echo and value is not None:
            print(repr(value))


READY = "[verigym kernel ready]\n"


def _replay(cells, scope):
    real_out, real_err = sys.stdout, sys.stderr
    for cell in cells:
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        try:
            _run(cell, scope, echo=False)
        except BaseException:  # noqa: BLE001 - a notebook keeps going after a failed cell
            pass
    sys.stdout, sys.stderr = real_out, real_err


def _run_visible(cell, scope, real_out, real_err):
    """Run one cell with its output on the real streams; 0 = ran, 1 = raised."""
    sys.stdout, sys.stderr = real_out, real_err
    status = 0
    try:
        _run(cell, scope, echo=True)
    except SystemExit as exc:
        print("SystemExit: %r (the kernel keeps running)" % (exc.code,), file=real_err)
    except BaseException:  # noqa: BLE001 - the model sees its own traceback
        exc_type, exc, tb = sys.exc_info()
        # Drop the kernel's own frames: the model only needs the frames of its cell.
        while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
            tb = tb.tb_next
        traceback.print_exception(exc_type, exc, tb, file=real_err)
        status = 1
    sys.stdout, sys.stderr = real_out, real_err  # a cell may have replaced them
    for stream in (real_out, real_err):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a cell may have closed it; the marker then goes missing
            pass
    return status


def main_replay():
    job = json.loads(sys.stdin.buffer.read())
    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    real_out, real_err = sys.stdout, sys.stderr
    _replay(job["history"], scope)
    status = _run_visible(job["cell"], scope, real_out, real_err)
    os.write(2, job["marker"].encode())
    os._exit(status)


def main_repl():
    requests = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    real_out, real_err = sys.stdout, sys.stderr
    os.write(1, READY.encode())
    for line in requests:
        job = json.loads(line)
        if "replay" in job:
            _replay(job["replay"], scope)
            status = 0
        else:
            status = _run_visible(job["cell"], scope, real_out, real_err)
        os.write(1, ("%s%d\n" % (job["marker"], status)).encode())
        os.write(2, job["marker"].encode())
    os._exit(0)


if "--repl" in sys.argv[1:]:
    main_repl()
else:
    main_replay()
