"""The prepared folder a run trains on (``driver run --blend B [--data-dir D]``).

A folder that ``driver data prep`` wrote for this blend is used with the choices that prep was
given (``--input``, ``--skip-invalid``, ``--sample``, ``--pass-rates``, ``--placeholder-source``,
kept in its manifest as ``request``): the same prep is redone only when the blend or those
inputs changed, and never against the hub for a folder prepared from local files. A folder with
no prep is prepared with the defaults. Where the recorded sources cannot be read any more (a
moved input, no network for a hub file) the prepared rows are used as they are, and the run
says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.blends import Blend
from trainer.data_prep import DataPrepError, PrepOptions, SourceUnavailable, prepare, sha256_file


@dataclass
class PreparedData:
    folder: Path
    manifest: dict[str, Any]
    note: str  # one line for the plan: where the rows come from


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / "manifest.json"
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except ValueError:
        return None
    return manifest if isinstance(manifest, dict) else None


def _outputs_intact(folder: Path, manifest: dict[str, Any]) -> bool:
    outputs = manifest.get("outputs") or {}
    return bool(outputs) and all((folder / name).is_file() and sha256_file(folder / name) == digest
                                 for name, digest in outputs.items())


def _options(folder: Path, request: dict[str, Any]) -> PrepOptions:
    return PrepOptions(output=folder, sample=request.get("sample"), input=Path(request["input"]) if request.get("input") else None,
                       skip_invalid=bool(request.get("skip_invalid")),
                       pass_rates=Path(request["pass_rates"]) if request.get("pass_rates") else None,
                       placeholder_sources=dict(request.get("placeholder_sources") or {}))


def _choices(request: dict[str, Any]) -> str:
    said = [f"--input {request['input']}"] if request.get("input") else ["the blend's sources"]
    said += ["--skip-invalid"] if request.get("skip_invalid") else []
    said += [f"--sample {request['sample']}"] if request.get("sample") is not None else []
    said += [f"--pass-rates {request['pass_rates']}"] if request.get("pass_rates") else []
    said += [f"--placeholder-source {k}={v}" for k, v in sorted((request.get("placeholder_sources") or {}).items())]
    return " ".join(said)


def _counts(manifest: dict[str, Any]) -> str:
    c = manifest.get("counts") or {}
    rejected = f", {c['rejected']} invalid rows left out" if c.get("rejected") else ""
    return f"{c.get('train', '?')} train / {c.get('val', '?')} val rows{rejected}"


def data_for_run(blend: Blend, folder: Path, *, progress: bool = True) -> PreparedData:
    """The prepared rows of ``blend`` in ``folder``: reused, redone with the recorded choices, or
    prepared with the defaults (see the module docstring). Raises :class:`DataPrepError`."""
    manifest = _read_manifest(folder)
    if manifest is None:
        result = prepare(blend, PrepOptions(output=folder, progress=progress))
        return PreparedData(folder, result.manifest, f"data: {folder} prepared from the blend's sources "
                                                     f"({_counts(result.manifest)})")
    if manifest.get("blend") != blend.name:
        raise DataPrepError(f"{folder} holds the rows of blend {manifest.get('blend')!r}, not of {blend.name!r}: pass "
                            f"--data-dir with a folder prepared by `driver data prep --blend {blend.name}`")
    request = manifest.get("request")
    intact = _outputs_intact(folder, manifest)
    if request is None:  # prepared before the manifest kept what was asked: its rows are what we have
        if not intact:
            raise DataPrepError(f"{folder}: its train/val files do not match its manifest; prepare it again "
                                f"(`driver data prep --blend {blend.name} --output {folder} --force`)")
        return PreparedData(folder, manifest, f"data: {folder} as prepared ({_counts(manifest)})")
    opts = _options(folder, request)
    opts.progress = progress
    gone = [str(p) for p in (opts.input, opts.pass_rates, *map(Path, opts.placeholder_sources.values()))
            if p is not None and not p.exists()]
    if gone:
        if not intact:
            raise DataPrepError(f"{folder} was prepared from {', '.join(gone)}, no longer there, and its rows do not "
                                f"match its manifest: prepare it again (`driver data prep --blend {blend.name} "
                                f"--output {folder} ...`)")
        return PreparedData(folder, manifest, f"data: {folder} as prepared with {_choices(request)} "
                                              f"({_counts(manifest)}; {', '.join(gone)} no longer there, so not re-checked)")
    try:
        result = prepare(blend, opts)
    except SourceUnavailable as exc:
        if not intact:
            raise
        return PreparedData(folder, manifest, f"data: {folder} as prepared with {_choices(request)} ({_counts(manifest)}; "
                                              f"its sources are not reachable to re-check: {str(exc)[:160]})")
    how = "as prepared" if result.skipped else "prepared again (the blend or its inputs changed)"
    return PreparedData(folder, result.manifest, f"data: {folder} {how} with {_choices(request)} "
                                                 f"({_counts(result.manifest)})")
