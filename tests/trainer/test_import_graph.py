"""The import graph of trainer/, servers/ and sandboxes/ (every import, module level or inside a
function; imports under ``if TYPE_CHECKING:`` are annotations and never run, so they do not count).

* no cycles, in any of the three;
* the directions of the house (ARCHITECTURE.md): ``servers`` and ``sandboxes`` import nothing of
  each other, the trainer or an environment; the trainer imports of ``servers`` only the client,
  the wire models and the model presets, and never an environment (it reads what environments
  publish through ``envs info`` / ``envs validate`` or a server's /info);
* the rollout wing (trainer/rollout/, docs/trainer-rollout.md) imports nothing of the engine, the
  commands or the launchers built on it, and the engine reaches generation only through the
  generator interface (a backend is a registered module, never imported by the engine).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trainer", "servers", "sandboxes")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The import nodes inside ``if TYPE_CHECKING:`` blocks."""
    out: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            out |= {n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return out


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports. ``from pkg import name`` imports ``pkg.name`` when that is a
    module (the package itself only initialises first), else ``pkg``."""
    found: set[str] = set()
    package = _module(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module(path)
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            submodules = {f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}")}
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(base)
    return found


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _files(package: str) -> dict[str, Path]:
    return {_module(p): p for p in (ROOT / package).rglob("*.py")
            if "gym_root" not in p.parts and "images" not in p.relative_to(ROOT / package).parts}


def _graph(package: str) -> dict[str, set[str]]:
    files = _files(package)
    return {name: {m for m in _imports(path) if m in files and m != name} for name, path in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
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
    return cycles


def _offenders(package: str, forbidden) -> dict[str, list[str]]:
    found = {name: sorted(m for m in _imports(path) if forbidden(name, m)) for name, path in _files(package).items()}
    return {k: v for k, v in found.items() if v}


def _under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_no_import_cycles_in_the_trainer_servers_or_sandboxes():
    for package in PACKAGES:
        cycles = _cycles(_graph(package))
        assert not cycles, f"import cycles in {package}/: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def _loads_environment_code(module: str) -> bool:
    # servers.registry imports environment classes (load_class); the trainer asks env_catalog instead
    return _under(module, "environments", "servers.registry")


def test_the_trainer_imports_no_environment():
    assert not _offenders("trainer", lambda _, m: _loads_environment_code(m))


def test_the_trainer_imports_only_the_client_wire_models_and_model_presets_of_servers():
    # the model package: its presets and how a model source is found (envs model serve reads the same);
    # kv_cache: a model forward's cache argument, shared by the decode engine, the in-process decode and
    # the logprob pass; process_budget: the per-user process limit check, shared by envs serve and driver run;
    # engine + sampling: the one decode engine, which the in-process backend runs on the policy's model;
    # rl_client: the client of a generation server speaking vLLM's RL surface (the server backend);
    # config_loader: the one YAML/override loader and closest-key hint, shared by envs and driver
    allowed = ("servers.client", "servers.wire", "servers.model.tiny", "servers.model.loading", "servers.model.kv_cache",
               "servers.process_budget", "servers.model.engine", "servers.model.sampling", "servers.model.rl_client",
               "servers.config_loader")
    assert not _offenders("trainer", lambda _, m: (_under(m, "servers") and not _under(m, *allowed) and m != "servers")
                          or _under(m, "sandboxes"))


def test_servers_and_sandboxes_import_nothing_of_each_other_the_trainer_or_an_environment():
    assert not _offenders("servers", lambda _, m: _under(m, "sandboxes", "trainer", "environments"))
    assert not _offenders("sandboxes", lambda _, m: _under(m, "servers", "trainer", "environments"))


def test_the_rollout_wing_stands_below_the_engine_and_the_commands():
    above = ("trainer.grpo", "trainer.dpo", "trainer.nemo_rl", "trainer.launch", "trainer.cli", "trainer.run_command",
             "trainer.data_prep", "trainer.blends", "trainer.model_servers", "trainer.curriculum")
    assert not _offenders("trainer", lambda name, m: _under(name, "trainer.rollout") and _under(m, *above))


def test_the_engine_generates_only_through_the_generator_interface():
    backends = ("trainer.rollout.local_generator", "trainer.rollout.decode", "trainer.rollout.server_generator")
    assert not _offenders("trainer", lambda name, m: _under(name, "trainer.grpo") and _under(m, *backends))
