"""Register a prepared blend as a W&B artifact with its lineage (``driver data prep --wandb``).

One W&B run of job type ``data-prep`` uses an input artifact ``<blend>-inputs`` (each source:
local files by ``file://`` reference with their checksums, hub files named in the metadata with
the sha256 data prep computed) and logs the output artifact ``<blend>-data`` (train/val/test
JSONL, manifest.json and the blend YAML, the manifest as metadata). In W&B the output's lineage
is then inputs -> prep run -> data, as the Nemotron recipes' ``DataBlendsArtifact``.

``WANDB_MODE=offline`` works without network: the run and both artifacts are written under the
output folder's ``wandb/`` and ``wandb sync`` uploads them later. Offline, W&B cannot record a
"used" artifact, so the run logs the inputs artifact itself and the data's metadata names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LoggedArtifact:
    name: str  # "<blend>-data:<alias>" as W&B names it
    run_dir: Path
    mode: str


def log_prepared_blend(output: Path, manifest: dict[str, Any], blend_file: str | None, *, project: str,
                       entity: str | None = None) -> LoggedArtifact:
    import wandb

    blend = manifest["blend"]
    run = wandb.init(project=project, entity=entity, job_type="data-prep", name=f"data-prep-{blend}",
                     dir=str(output), config={"blend": blend, "options": manifest.get("options", {}),
                                              "fingerprint": manifest.get("fingerprint")},
                     reinit="finish_previous")
    try:
        inputs = wandb.Artifact(f"{blend}-inputs", type="raw-data",
                                description=f"the sources blend {blend!r} reads",
                                metadata={"sources": manifest.get("sources", []),
                                          "placeholder_sources": manifest.get("placeholder_sources", {})})
        for source in manifest.get("sources", []):
            path = Path(source["file"])
            if path.is_file():
                inputs.add_reference(path.resolve().as_uri(), name=path.name)
        offline = str(run.settings.mode) in ("offline", "dryrun")
        if offline:  # W&B cannot `use` an artifact offline: log it from this run; the data's metadata names it
            run.log_artifact(inputs)
        else:
            run.use_artifact(inputs)

        data = wandb.Artifact(f"{blend}-data", type="dataset",
                              description=f"blend {blend!r} prepared by `driver data prep`",
                              metadata={"manifest": manifest, "inputs": f"{blend}-inputs",
                                        "input_sha256": {x["source"]: x["sha256"] for x in manifest.get("sources", [])}})
        for name in manifest.get("outputs", {}):
            data.add_file(str(output / name), name=name)
        data.add_file(str(output / "manifest.json"), name="manifest.json")
        if blend_file and Path(blend_file).is_file():
            data.add_file(blend_file, name=f"blend_{Path(blend_file).name}")
        logged = run.log_artifact(data)
        if not offline:
            logged.wait()
        return LoggedArtifact(f"{blend}-data", Path(run.dir).parent, "offline" if offline else "online")
    finally:
        run.finish()
