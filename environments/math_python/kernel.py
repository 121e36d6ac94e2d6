"""Notebook-style cell runner, executed INSIDE the session sandbox (stdlib only, run with ``-c``).

stdin: JSON ``{"history": [cell, ...], "cell": str, "marker": str}``.

The sandbox backends give no process that outlives one exec (the process backend's PID
namespace dies with it), so state persists by *replay*: every earlier cell of the session
is re-run first with its output discarded and its exceptions swallowed (a failed notebook
cell also keeps whatever it assigned before raising), then the new cell runs with its
output going to the real stdout/stderr. Like a notebook, a final bare expression is
echoed with ``repr``.

Exit status: 0 = the cell ran, 1 = it raised (traceback on stderr). The server only
relays this to the model; no reward depends on it.

Completion marker: after the new cell, the kernel writes the job's ``marker`` (random per
call) to fd 2 and leaves with ``os._exit`` (no atexit hooks of the cell). A cell that ends the
process itself (``os._exit``, a signal to itself) never gets there, so the server can tell
"ran" from "took the kernel down" and keeps only cells that ran in the replay history; one
``os._exit(0)`` would otherwise silently end every later call of the session before its cell.
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


def main():
    job = json.loads(sys.stdin.buffer.read())
    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    real_out, real_err = sys.stdout, sys.stderr
    for cell in job["history"]:
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        try:
            _run(cell, scope, echo=False)
        except BaseException:  # noqa: BLE001 - a notebook keeps going after a failed cell
            pass
    sys.stdout, sys.stderr = real_out, real_err
    status = 0
    try:
        _run(job["cell"], scope, echo=True)
    except SystemExit as exc:
        print("SystemExit: %r (the kernel keeps running)" % (exc.code,), file=real_err)
    except BaseException:  # noqa: BLE001 - the model sees its own traceback
        exc_type, exc, tb = sys.exc_info()
        # Drop the kernel's own frames: the model only needs the frames of its cell.
        while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
            tb = tb.tb_next
        traceback.print_exception(exc_type, exc, tb, file=real_err)
        status = 1
    for stream in (real_out, real_err):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a cell may have closed it; the marker then goes missing
            pass
    os.write(2, job["marker"].encode())
    os._exit(status)


main()
