"""verigym's SWE grading: hook unittest for the result channel (``verigym_harness``), then run
the interpreter's own ``sitecustomize`` (this one, first on ``PYTHONPATH``, took its name)."""

import sys


def _chain():
    import importlib.machinery
    import importlib.util
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if p and os.path.abspath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    import verigym_harness
    verigym_harness.install()
finally:
    _chain()
