"""``driver data prep``: blend -> ``train.jsonl``, ``val.jsonl``, ``manifest.json``.

Steps: load every source (line numbers kept) -> ``--sample`` -> resolve ``_hf_placeholder``
rows -> validate every row against the environment it routes to -> split (last
``val_holdout`` rows or a ratio) -> train-only transforms (curriculum, per-env weights,
low-effort conversion) -> write, with a manifest of sources, hashes, counts and options.

Blend files are read line by line with orjson rather than ``datasets.load_dataset('json')``
on purpose: the Nemotron blends mix row shapes (Arrow would force one schema and add
``null`` for every missing key, which NeMo-Gym's ``extra="forbid"`` models then reject) and
bad rows must be reported by line number. Hub files are fetched with ``huggingface_hub``
(the datasets library's own downloader); placeholder *source* datasets are loaded with
``datasets``.

Routing and validation come from the environments themselves, across a process boundary
(:mod:`trainer.env_catalog`: ``envs info`` for the agent names each declares, ``envs validate``
for its row model): no environment module is imported here.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from trainer import env_catalog
from trainer.blends import Blend, Source
from trainer.curriculum import SOURCE_KEY, attach_pass_rates, read_pass_rates, row_key
from trainer.env_catalog import EnvCatalog
from trainer.placeholders import PLACEHOLDER_KEY, PlaceholderError, PlaceholderSourceError, SourceTables, resolve_row
from trainer.progress import progress
from trainer.reasoning_control import apply_reasoning_control

PREP_VERSION = 3  # 2: rows validated by the environment's own row model (envs validate), routes in the manifest;
# 3: the manifest's routes include default_env (the trainer builds its tasks from them)
VALIDATE_CHUNK = 20_000  # rows per `envs validate` call: one child process each, a progress step each


class DataPrepError(RuntimeError):
    pass


class SourceUnavailable(DataPrepError):
    """A source (a hub file, a placeholder dataset) cannot be read here: offline, or not downloaded."""


@dataclass
class Loaded:
    row: dict[str, Any]
    source: str
    line: int


@dataclass
class Rejected:
    source: str
    line: int
    reason: str
    row: Any

    def describe(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}"


@dataclass
class PrepOptions:
    output: Path
    sample: int | None = None
    force: bool = False
    input: Path | None = None
    skip_invalid: bool = False
    progress: bool = True
    pass_rates: Path | None = None  # per-prompt pass rates from `driver rollout` (trainer/curriculum.py)
    # local copies of placeholder source datasets, {dataset name: file}, over the blend's local_sources
    placeholder_sources: dict[str, str] = field(default_factory=dict)

    def request(self) -> dict[str, Any]:
        """What was asked for, with absolute paths: the manifest keeps it, so `driver run` can
        redo this prep with the same choices (trainer/prepared_data.py)."""
        return {"input": str(self.input.resolve()) if self.input else None, "sample": self.sample,
                "skip_invalid": self.skip_invalid, "pass_rates": str(self.pass_rates.resolve()) if self.pass_rates else None,
                "placeholder_sources": {k: str(Path(v).resolve()) for k, v in self.placeholder_sources.items()}}


@dataclass
class PrepResult:
    output: Path
    manifest: dict[str, Any]
    skipped: bool = False
    rejected: list[Rejected] = field(default_factory=list)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---- sources -----------------------------------------------------------------------------
def _source_file(blend: Blend, source: Source, override: Path | None, workdir: Path) -> Path:
    """The local JSONL file behind a source (downloading / generating it if needed)."""
    if override is not None:
        if override.is_dir():
            name = Path(source.hub.file).name if source.hub else Path(source.path or "").name
            candidate = override / name
            if not candidate.exists():
                raise DataPrepError(f"--input {override}: expected {name} in it for source {source.label()}")
            return candidate
        return override
    if source.path:
        path = Path(source.path)
        return path if path.is_absolute() else (blend.folder / path)
    if source.hub:
        return _hub_file(source)
    gen = source.generate
    assert gen is not None
    out = workdir / f"generated_{gen.env}_{gen.seed}.jsonl"
    cmd = [sys.executable, "-m", "servers.cli", "generate", gen.env, "--size", str(gen.size), "--seed", str(gen.seed),
           "--output", str(out)]
    if gen.tasks:
        cmd += ["--tasks", ",".join(gen.tasks)]
    cmd += [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in gen.options.items()]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise DataPrepError(f"source {source.label()}: `envs generate` failed:\n{done.stderr[-2000:]}")
    return out


def _hub_file(source: Source) -> Path:
    """The hub file, downloaded or from the cache; no network is one line saying what to do."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    assert source.hub is not None
    try:
        return Path(hf_hub_download(source.hub.repo, source.hub.file, repo_type="dataset",
                                    revision=source.hub.revision))
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError, OSError) as exc:
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise SourceUnavailable(
            f"cannot get {source.label()} ({type(exc).__name__}: {reason}). Offline? Pass --input FILE (or a folder "
            f"holding {Path(source.hub.file).name}), or --data-dir with a prepared blend, or set HF_HUB_OFFLINE=1 "
            "with the file in the Hugging Face cache (download it once with `hf download "
            f"{source.hub.repo} {source.hub.file} --repo-type dataset`)") from None


def planned_envs(blend: Blend, catalog: EnvCatalog | None = None) -> tuple[list[str], list[str]]:
    """The environments a blend's rows route to, as far as they are known before data prep, without
    downloading or generating anything: a ``generate`` source names its environment; a local file,
    or a hub file already in the Hugging Face cache, is read and its rows routed as data prep routes
    them. Returns (environments, labels of the sources not readable yet)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    routes = blend.routes((catalog if catalog is not None else env_catalog.installed()).routes())
    envs: set[str] = set()
    unknown: list[str] = []
    for source in blend.sources:
        if source.generate is not None:
            envs.add(source.generate.env)
            continue
        if source.hub is not None:
            try:
                path = Path(hf_hub_download(source.hub.repo, source.hub.file, repo_type="dataset",
                                            revision=source.hub.revision, local_files_only=True))
            except (LocalEntryNotFoundError, OSError, ValueError):
                unknown.append(source.label())
                continue
        else:
            path = Path(source.path or "")
            path = path if path.is_absolute() else blend.folder / path
        if not path.is_file():
            unknown.append(source.label())
            continue
        for loaded in _read_jsonl(path, source.label(), source.default_agent, []):
            env = routes.env_for(loaded.row)
            if env:
                envs.add(env)
    return sorted(envs), unknown


def _read_jsonl(path: Path, label: str, default_agent: str | None,
                rejected: list[Rejected]) -> Iterator[Loaded]:
    if not path.exists():
        raise DataPrepError(f"source {label}: file {path} does not exist")
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                rejected.append(Rejected(label, number, f"not valid JSON: {exc}", line.decode(errors="replace")[:500]))
                continue
            if not isinstance(row, dict):
                rejected.append(Rejected(label, number, "a row must be a JSON object", row))
                continue
            if default_agent and "agent_ref" not in row:
                row["agent_ref"] = {"type": "responses_api_agents", "name": default_agent}
            yield Loaded(row, label, number)


# ---- validation ----------------------------------------------------------------------------
class RowValidator:
    """Routes each row once (``agent_ref.name`` -> environment, from the environments' declared
    agent names and the blend's ``agent_map``) and checks it the way that environment's server
    will: with its own row model, in a child process (:mod:`trainer.env_catalog`), so no
    environment code is imported here and data prep accepts exactly what ``/verify`` accepts."""

    def __init__(self, blend: Blend, catalog: EnvCatalog | None = None):
        self.blend = blend
        self.catalog = catalog if catalog is not None else env_catalog.installed()
        self.routes = blend.routes(self.catalog.routes())

    def route(self, row: dict[str, Any]) -> str | None:
        return self.routes.env_for(row)

    def _precheck(self, row: dict[str, Any]) -> str | None:
        if PLACEHOLDER_KEY in row:
            return f"unresolved {PLACEHOLDER_KEY} row (dataset {row.get('dataset')!r}): set placeholders.resolve"
        env = self.route(row)
        if env is None:
            return "no agent_ref.name (nor env field) and the blend sets no default_env"
        if env not in self.catalog.described:
            agent = (row.get("agent_ref") or {}).get("name")
            return (f"agent_ref.name {agent!r} routes to environment {env!r}, which is not installed "
                    f"(known: {', '.join(self.catalog.names)}); map it in the blend's agent_map")
        broken = self.catalog.error_of(env)
        if broken:
            return f"environment {env!r} could not be loaded to read its row fields: {broken}"
        params = row.get("responses_create_params")
        if not isinstance(params, dict) or not params.get("input"):
            return "responses_create_params.input is missing or empty"
        return None

    def check_all(self, rows: list[dict[str, Any]]) -> list[str | None]:
        """None for each row its environment accepts, else the reason it does not."""
        reasons = [self._precheck(r) for r in rows]
        pending = [i for i, reason in enumerate(reasons) if reason is None]
        for i, reason in zip(pending, env_catalog.validate_rows((self.route(rows[i]) or "", rows[i]) for i in pending)):
            reasons[i] = reason
        return reasons

    def check(self, row: dict[str, Any]) -> str | None:
        return self.check_all([row])[0]


# ---- transforms ------------------------------------------------------------------------------
def split_rows(rows: list[Loaded], blend: Blend) -> tuple[list[Loaded], list[Loaded], list[Loaded]]:
    """(train, val, test): the last ``val_holdout`` rows or a ``val_ratio`` fraction -> val (the
    Super recipe), or with ``train_ratio`` the first fraction -> train, the next ``val_ratio`` ->
    val and the rest -> test (the Nano recipe)."""
    rows = list(rows)
    split = blend.split
    if split.shuffle_seed is not None:
        random.Random(split.shuffle_seed).shuffle(rows)
    if split.train_ratio is not None:
        n_train = int(round(len(rows) * split.train_ratio))
        n_val = min(int(round(len(rows) * (split.val_ratio or 0.0))), len(rows) - n_train)
        if n_train == 0 and rows:
            raise DataPrepError(f"{len(rows)} valid rows: train_ratio {split.train_ratio} leaves no training rows")
        return rows[:n_train], rows[n_train:n_train + n_val], rows[n_train + n_val:]
    if split.val_ratio is not None:
        n_val = int(round(len(rows) * split.val_ratio))
    else:
        n_val = split.val_holdout or 0
    if n_val >= len(rows) and n_val > 0:
        raise DataPrepError(f"{len(rows)} valid rows, but the split holds out {n_val} for validation")
    return ((rows[:-n_val], rows[-n_val:]) if n_val else (rows, [])) + ([],)


def apply_curriculum(rows: list[Loaded], blend: Blend) -> tuple[list[Loaded], int]:
    cur = blend.curriculum
    key = cur.pass_rate_key
    dropped = 0
    if cur.max_pass_rate is not None:
        kept = [r for r in rows if not (isinstance(r.row.get(key), (int, float)) and r.row[key] > cur.max_pass_rate)]
        dropped, rows = len(rows) - len(kept), kept
    if cur.sort_by_difficulty:
        # Easiest first (highest recorded pass rate); stable, so ties keep file order; unknown last.
        rows = sorted(rows, key=lambda r: -r.row[key] if isinstance(r.row.get(key), (int, float)) else float("inf"))
    return rows, dropped


def apply_weights(rows: list[Loaded], blend: Blend, route: Callable[[dict[str, Any]], str | None],
                  seed: int = 0) -> list[Loaded]:
    """Per-environment multipliers: w<1 keeps a deterministic w-fraction, w>1 repeats rows."""
    if not blend.weights:
        return rows
    rng = random.Random(seed)
    out: list[Loaded] = []
    for r in rows:
        w = blend.weights.get(route(r.row) or "", 1.0)
        copies = int(w) + (1 if rng.random() < w - int(w) else 0)
        out += [r] * copies
    return out


def apply_low_effort(rows: list[Loaded], blend: Blend, route: Callable[[dict[str, Any]], str | None]) -> int:
    """Append ``low_string`` to the last user message of a fraction of eligible rows."""
    cfg = blend.low_effort
    if cfg.fraction <= 0:
        return 0
    rng = random.Random(cfg.seed)
    converted = 0
    for r in rows:
        if route(r.row) not in cfg.envs or rng.random() >= cfg.fraction:
            continue
        params = dict(r.row["responses_create_params"])
        items = params["input"]
        if isinstance(items, str):
            params["input"] = items + " " + cfg.low_string
        else:
            items = [dict(m) for m in items]
            for m in reversed(items):
                if m.get("role") == "user" and isinstance(m.get("content"), str):
                    m["content"] = m["content"] + " " + cfg.low_string
                    break
            else:
                continue
            params["input"] = items
        r.row = {**r.row, "responses_create_params": params}
        converted += 1
    return converted


# ---- the command -------------------------------------------------------------------------------
def _fingerprint(blend: Blend, inputs: dict[str, str], opts: PrepOptions) -> str:
    blend_text = Path(blend.path).read_text() if blend.path else blend.model_dump_json()
    payload = json.dumps({"v": PREP_VERSION, "blend": blend_text, "inputs": inputs, "sample": opts.sample,
                          "skip_invalid": opts.skip_invalid,
                          **({"pass_rates": sha256_file(opts.pass_rates)} if opts.pass_rates else {}),
                          **({"placeholder_sources": opts.placeholder_sources} if opts.placeholder_sources else {})},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _write(path: Path, rows: list[Loaded]) -> None:
    with open(path, "wb") as fh:
        for r in rows:
            fh.write(orjson.dumps(r.row) + b"\n")


def _check_given_files(opts: PrepOptions) -> None:
    """Files named on the command line exist, before anything is read or downloaded."""
    if opts.input is not None and not opts.input.exists():
        raise DataPrepError(f"--input {opts.input} does not exist: give the local copy of the blend's file "
                            "(or a folder holding it)")
    if opts.pass_rates is not None and not opts.pass_rates.is_file():
        raise DataPrepError(f"--pass-rates {opts.pass_rates} does not exist: `driver rollout --blend BLEND --split "
                            "train --output OUT.jsonl` writes OUT_pass_rates.jsonl (it prints the path)")
    for name, path in opts.placeholder_sources.items():
        if not Path(path).exists():
            raise DataPrepError(f"--placeholder-source {name}={path}: {path} does not exist")


def prepare(blend: Blend, opts: PrepOptions) -> PrepResult:
    _check_given_files(opts)
    out = opts.output
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="verigym-prep-"))
    start = time.perf_counter()
    files = {s.label(): _source_file(blend, s, opts.input, workdir) for s in blend.sources}
    inputs = {label: sha256_file(path) for label, path in files.items()}
    fingerprint = _fingerprint(blend, inputs, opts)
    manifest_path = out / "manifest.json"
    if not opts.force and manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        outputs_ok = all((out / name).exists() and sha256_file(out / name) == digest
                         for name, digest in old.get("outputs", {}).items())
        if old.get("fingerprint") == fingerprint and outputs_ok:
            return PrepResult(out, old, skipped=True)

    rejected: list[Rejected] = []
    loaded: list[Loaded] = []
    sample = opts.sample if opts.sample is not None else blend.sample
    for source in blend.sources:
        for item in _read_jsonl(files[source.label()], source.label(), source.default_agent, rejected):
            if sample is not None and len(loaded) >= sample:
                break
            loaded.append(item)

    resolved = 0
    if blend.placeholders.resolve:
        tables = SourceTables({**blend.placeholders.local_sources, **opts.placeholder_sources})
        pending = [r for r in loaded if PLACEHOLDER_KEY in r.row]
        with progress(len(pending), desc="resolve placeholders", unit="row",
                      enabled=opts.progress and bool(pending)) as bar:
            for r in pending:
                try:
                    r.row = resolve_row(r.row, tables.fetch)
                    resolved += 1
                except PlaceholderSourceError as exc:
                    raise SourceUnavailable(f"{exc} ({len(pending)} placeholder rows need it)") from None
                except PlaceholderError as exc:
                    rejected.append(Rejected(r.source, r.line, f"placeholder: {exc}", r.row))
                bar.update(1)

    validator = RowValidator(blend)
    bad_ids = {id(r.row) for r in rejected}
    candidates = [r for r in loaded if id(r.row) not in bad_ids]
    valid: list[Loaded] = []
    with progress(len(candidates), desc="validate", unit="row", enabled=opts.progress) as bar:
        for start_at in range(0, len(candidates), VALIDATE_CHUNK):
            chunk = candidates[start_at:start_at + VALIDATE_CHUNK]
            for r, reason in zip(chunk, validator.check_all([r.row for r in chunk])):
                if reason:
                    rejected.append(Rejected(r.source, r.line, reason, r.row))
                else:
                    valid.append(r)
            bar.update(len(chunk))
    rejected.sort(key=lambda x: (x.source, x.line))
    if rejected and not opts.skip_invalid:
        shown = "\n".join("  " + x.describe() for x in rejected[:20])
        more = f"\n  ... and {len(rejected) - 20} more" if len(rejected) > 20 else ""
        raise DataPrepError(f"{len(rejected)} invalid row(s) in blend {blend.name!r}:\n{shown}{more}\n"
                            "Fix them, or pass --skip-invalid to write them to rejected.jsonl and continue.")

    train, val, test = split_rows(valid, blend)
    rate_key = blend.curriculum.pass_rate_key
    matched = 0
    if opts.pass_rates:  # the current policy's pass rates (driver rollout) -> the curriculum below
        rates = read_pass_rates(opts.pass_rates)
        for r in train:
            r.row, hit = attach_pass_rates([r.row], rates, rate_key)
            r.row, matched = r.row[0], matched + hit
    source_keys = {id(r): row_key(r.row, rate_key) for r in train}
    train, dropped_easy = apply_curriculum(train, blend)
    before_weights = len(train)
    train = apply_weights(train, blend, validator.route)
    low_effort = apply_low_effort(train, blend, validator.route)
    control = apply_reasoning_control(train, blend.reasoning_control, validator.route, get=lambda r: r.row,
                                      put=lambda r, row: setattr(r, "row", row))
    for r in train:  # a rewritten row keeps its source's key, so its pass rate finds it next time
        if row_key(r.row, rate_key) != source_keys[id(r)]:
            r.row = {**r.row, SOURCE_KEY: source_keys[id(r)]}

    _write(out / "train.jsonl", train)
    _write(out / "val.jsonl", val)
    split_names = ["train.jsonl", "val.jsonl"]
    if blend.split.train_ratio is not None:
        _write(out / "test.jsonl", test)
        split_names.append("test.jsonl")
    elif (out / "test.jsonl").exists():
        (out / "test.jsonl").unlink()  # a previous ratio split's test rows are not this prep's
    rejected_path = out / "rejected.jsonl"
    if rejected:
        with open(rejected_path, "wb") as fh:
            for x in rejected:
                fh.write(orjson.dumps({"source": x.source, "line": x.line, "reason": x.reason, "row": x.row}) + b"\n")
    elif rejected_path.exists():
        rejected_path.unlink()

    def counts(rows: list[Loaded]) -> dict[str, int]:
        return dict(sorted(Counter(validator.route(r.row) or "?" for r in rows).items()))

    outputs = {name: sha256_file(out / name) for name in split_names}
    manifest = {
        "blend": blend.name, "blend_file": blend.path, "prep_version": PREP_VERSION, "fingerprint": fingerprint,
        "sources": [{"source": label, "file": str(files[label]), "sha256": digest} for label, digest in inputs.items()],
        "placeholder_sources": tables.describe() if blend.placeholders.resolve else {},
        "request": opts.request(),
        "options": {"sample": sample, "skip_invalid": opts.skip_invalid, "input": str(opts.input) if opts.input else None,
                    "split": blend.split.model_dump(), "curriculum": blend.curriculum.model_dump(),
                    "weights": blend.weights, "low_effort": blend.low_effort.model_dump(),
                    "reasoning_control": blend.reasoning_control.model_dump(),
                    "pass_rates": str(opts.pass_rates) if opts.pass_rates else None},
        "counts": {"loaded": len(loaded) + sum(1 for x in rejected if x.reason.startswith("not valid JSON")
                                               or x.reason.startswith("a row must")),
                   "placeholders_resolved": resolved, "rejected": len(rejected), "train": len(train), "val": len(val), "test": len(test),
                   "curriculum_dropped": dropped_easy, "weights_delta": len(train) - before_weights,
                   "low_effort_converted": low_effort, "pass_rates_matched": matched, "reasoning_off": control["reasoning_off"],
                   "reasoning_budget": control["reasoning_budget"], "train_per_env": counts(train), "val_per_env": counts(val),
                   "test_per_env": counts(test)},
        **validator.routes.to_manifest(),  # agent_map, default_env: the trainer's tasks are routed by them
        "outputs": outputs, "seconds": round(time.perf_counter() - start, 2),
    }
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return PrepResult(out, manifest, rejected=rejected)


def prep_blend(blend_name: str, output: Path, *, sample: int | None = None, force: bool = False,
               input_path: Path | None = None, skip_invalid: bool = False, pass_rates: Path | None = None,
               placeholder_sources: dict[str, str] | None = None) -> PrepResult:
    """``driver data prep`` by blend name."""
    from trainer.blends import load_blend

    return prepare(load_blend(blend_name), PrepOptions(output=output, sample=sample, force=force, input=input_path,
                                                       skip_invalid=skip_invalid, pass_rates=pass_rates,
                                                       placeholder_sources=dict(placeholder_sources or {})))
