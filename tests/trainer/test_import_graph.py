"""The trainer's import graph (every import, module level or inside a function): no cycles
between trainer modules, and no environment module imported (the trainer reads what environments
publish through `envs info` / `envs validate` or a server's /info, never their code)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    package = _module(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in (ROOT / "trainer").rglob("*.py") if "gym_root" not in p.parts}
    return {name: {m for m in _imports(path) if m in files and m != name} for name, path in files.items()}


def test_no_import_cycles_in_the_trainer():
    graph = _graph()
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str], done: set[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in stack:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in done:
                visit(nxt, stack + [nxt], done)
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            visit(start, [start], done)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def _loads_environment_code(module: str) -> bool:
    # servers.registry imports environment classes (load_class); the trainer asks env_catalog instead
    return module == "environments" or module.startswith("environments.") or module.startswith("servers.registry")


def test_the_trainer_imports_no_environment():
    offenders = {name: sorted(m for m in _imports(path) if _loads_environment_code(m))
                 for name, path in ((_module(p), p) for p in (ROOT / "trainer").rglob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}
