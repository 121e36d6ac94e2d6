"""Sandboxes of SWE instance images, shared by ``swe`` and ``swe_gen``: the image store
(pull / local build / SIF), sandbox specs, shielded creation, apptainer priming, warm pools,
and the container part of the config.

A mixin over :class:`sandboxes.env_support.SandboxedEnvironment`; an environment using it
has a config that is a :class:`SweContainerConfig` and decides itself which image a row needs
(``ensure_image_ref``) and what runs in the sandbox.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from environments.swe.images import ContainerImages, ImageUnavailable, SifImages
from sandboxes import SandboxSpec
from sandboxes.base import Sandbox, SandboxError
from sandboxes.env_support import SandboxedEnvironment, SandboxLimitsConfig
from sandboxes.pool import SandboxPool
from servers.environment import EnvConfig

SWE_FOLDER = Path(__file__).resolve().parent  # local_images recipes are relative to it (the tiny image lives here)
WORKSPACE = "/workspace"  # apptainer: SIF is read-only, the repo is copied to the bound workdir


class SweContainerConfig(SandboxLimitsConfig, EnvConfig):
    """Keys of every environment that grades in SWE instance images."""

    sandbox_backend: Literal["container", "apptainer"] = Field("container", description="sandboxes.open_backend name.")
    sandbox_env: dict[str, str] = Field(default_factory=dict, description="Environment variables of every sandbox (e.g. PYTHONDONTWRITEBYTECODE).")
    registries: list[str] = Field(["docker.io"], description="Registries tried in order for references without one.")
    pull_missing_images: bool = Field(False, description="Pull a missing image at verify/seed time (else: sandbox_error; use `envs prepare`).")
    local_images: dict[str, str] = Field({"verigym-swe-tiny:latest": "images/tiny/build.sh"},
                                         description="Images built from a local script (path relative to environments/swe/) instead of pulled.")
    build_local_images: bool = Field(True, description="Build local_images on first use when missing.")
    min_free_disk_gb: float = Field(20.0, ge=0, description="Refuse to pull when the image store has less free disk.")
    pull_timeout_s: float = Field(1800.0, gt=0, description="Limit of one image pull.")
    build_timeout_s: float = Field(900.0, gt=0, description="Limit of one local image build.")
    apptainer_binary: str = Field("apptainer", description="apptainer (or singularity) binary for `pull`.")
    repo_dir: str = Field("/testbed", description="Repository path inside the image (SWE-bench: /testbed).")
    pre_test_command: str = Field(
        "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi",
        description="Shell run before the test command (SWE-bench images: activate the conda env).")
    apply_timeout_s: float = Field(120.0, gt=0, description="Limit of applying the patches.")
    test_timeout_s: float = Field(1800.0, gt=0, description="Limit of the test command (SWE-bench default 1800 s).")
    memory_mb: int = Field(8192, ge=256, description="Memory limit of a sandbox.")
    max_processes: int = Field(512, ge=16, description="Processes at once in a sandbox.")
    max_output_bytes: int = Field(16 << 20, ge=1 << 16, description="Test log captured per stream; past it the run is cut.")
    warm_pool_size: int = Field(0, ge=0, description="Grading containers kept started per image (0: start one per grade).")
    warm_pool_images: int = Field(4, ge=1, description="Images with a warm pool at once (least recently used dropped).")
    log_tail_chars: int = Field(4000, ge=0, description="Characters of the test log in the reply.")
    protect_test_infrastructure: bool = Field(
        True, description="Put back test code, conftest.py, pytest/tox/setup.cfg/pyproject settings, sitecustomize/.pth, "
        "package metadata and bytecode the patch changed, and remove new modules that shadow the standard library or "
        "the test tools (environments/swe/integrity.py). false = SWE-bench / NeMo-Gym parity.")
    result_channel: Literal["harness", "log"] = Field(
        "harness", description="Where per-test statuses come from: harness = a result channel the test run's harness "
        "writes outside the repository (a printed or atexit-forged log is never read); log = the test log, as SWE-bench "
        "and NeMo-Gym read it (parity).")
    log_channel_repos: list[str] = Field(
        ["sympy/sympy", "sphinx-doc/sphinx"], description="Repositories whose test runner the harness cannot hook "
        "(sympy's bin/test, tox): read from the log even with result_channel harness.")


class InstanceSandboxes(SandboxedEnvironment):
    """Mixin (before ``Environment``): images and sandboxes of SWE instances. The environment
    defines ``image_for(row) -> ref`` and ``ensure_image(row, pull=) -> (ref, state)``; with
    them it gets ``envs prepare NAME --data ROWS.jsonl`` (``prepare``)."""

    open_backend_at_setup = False  # the server starts without a container engine; /health says what is missing
    config: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._images: ContainerImages | SifImages | None = None
        self._pools: dict[str, SandboxPool] = {}

    @property
    def images(self) -> ContainerImages | SifImages:
        if self._images is None:
            cfg = self.config
            if cfg.sandbox_backend == "apptainer":
                self._images = SifImages(registries=cfg.registries, binary=cfg.apptainer_binary,
                                         pull_timeout_s=cfg.pull_timeout_s)
            else:
                local = {ref: (SWE_FOLDER / path) for ref, path in cfg.local_images.items()}
                self._images = ContainerImages(base_url=cfg.sandbox_options.get("base_url"), registries=cfg.registries,
                                               local_images=local, min_free_disk_gb=cfg.min_free_disk_gb,
                                               pull_timeout_s=cfg.pull_timeout_s, build_timeout_s=cfg.build_timeout_s)
        return self._images

    async def ensure_image_ref(self, ref: str, *, pull: bool | None = None, docker_ref: str | None = None) -> str:
        """'present' | 'pulled' | 'built'; raises ImageUnavailable. ``docker_ref``: what a missing
        SIF is pulled from (apptainer)."""
        pull = self.config.pull_missing_images if pull is None else pull
        if isinstance(self.images, SifImages):
            return await self.images.ensure(ref, pull=pull, docker_ref=docker_ref)
        return await self.images.ensure(ref, pull=pull, build=self.config.build_local_images)

    async def health(self) -> dict[str, Any]:
        backend = await super().health()
        if not backend.get("ok") and not backend.get("fatal") and self.config.sandbox_backend == "container":
            backend.setdefault("hint", f"the {getattr(self, 'name', 'swe')} env needs a container engine: run "
                                       "scripts/ci_podman.sh (Podman's Docker API) or set DOCKER_HOST / sandbox_options.base_url")
        # fatal (a backend that cannot work here, e.g. no apptainer binary) at the top: envs serve stops at once
        lifted = {key: backend[key] for key in ("fatal", "error") if backend.get(key)}
        return {"ok": bool(backend.get("ok")), **lifted, "sandbox_backend": self.config.sandbox_backend,
                "backend": backend, "warm_pools": {ref: {"idle": p.idle, "total": p.total} for ref, p in self._pools.items()}}

    async def close(self) -> None:
        for pool in self._pools.values():
            await pool.close()
        self._pools.clear()
        await super().close()
        if self._images is not None:
            self._images.close()

    def sandbox_spec(self, image: str, repo_dir: str) -> SandboxSpec:
        cfg = self.config
        workdir = WORKSPACE if cfg.sandbox_backend == "apptainer" else repo_dir
        limits = replace(cfg.limits(cfg.test_timeout_s), max_file_mb=1024, max_open_files=1024)
        return SandboxSpec(image=image, workdir=workdir, limits=limits, env=dict(cfg.sandbox_env))

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        # Shielded: a verify cancelled by its deadline must not leave a container behind.
        task = asyncio.ensure_future(self.backend.create(spec))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            def cleanup(done: asyncio.Future) -> None:
                if not done.cancelled() and done.exception() is None:
                    asyncio.ensure_future(done.result().destroy())
            task.add_done_callback(cleanup)
            raise

    def uses_channel(self, repo: str) -> bool:
        return self.config.result_channel == "harness" and repo not in self.config.log_channel_repos

    @property
    def grade_scratch(self) -> str:
        """Where a grade's own files go in the sandbox, outside the repository (apptainer: /tmp is
        private to each exec, so a hidden folder of the bound workdir)."""
        return f"{WORKSPACE}/.verigym" if self.config.sandbox_backend == "apptainer" else "/tmp"

    async def prime(self, sandbox: Sandbox, repo_dir: str) -> str:
        """Where the repository is in this sandbox (apptainer: copy it to the writable workdir)."""
        if self.config.sandbox_backend != "apptainer":
            return repo_dir
        copied = await sandbox.exec(["cp", "-a", f"{repo_dir}/.", WORKSPACE], timeout=self.config.apply_timeout_s)
        if not copied.ok:
            raise SandboxError(f"copying {repo_dir} into the workdir failed: {copied.text('stderr')[-300:]}")
        return WORKSPACE

    def pool_for(self, image: str, spec: SandboxSpec) -> SandboxPool | None:
        """The warm pool of ``image`` (None when warm_pool_size is 0), most recently used last."""
        if self.config.warm_pool_size <= 0:
            return None
        pool = self._pools.pop(image, None)
        if pool is None:
            pool = SandboxPool(self.backend, spec, size=self.config.warm_pool_size)
            asyncio.ensure_future(pool.start(wait=False))
            while len(self._pools) >= self.config.warm_pool_images:  # drop the least recently used pool
                oldest = next(iter(self._pools))
                asyncio.ensure_future(self._pools.pop(oldest).close())
        self._pools[image] = pool  # re-inserted: most recently used last
        return pool

    # ---- envs prepare NAME --data ROWS.jsonl ---------------------------------------------
    @classmethod
    async def prepare(cls, config: Any, rows: list[dict[str, Any]], progress: Any = None) -> dict[str, Any]:
        """Pre-pull (or build) every image the rows need; a clear error for any that cannot be had."""
        env = cls(config)
        by_image: dict[str, list[Any]] = {}
        no_image: dict[str, str] = {}
        invalid = 0
        for number, raw in enumerate(rows, start=1):
            try:
                row = cls.Row.model_validate(raw)  # type: ignore[attr-defined]
            except ValidationError:
                invalid += 1
                continue
            try:
                by_image.setdefault(env.image_for(row), []).append(row)
            except ImageUnavailable as exc:  # the row names no usable image
                no_image[f"row {number}"] = str(exc)
        if progress is not None and invalid:
            progress.update(invalid)
        summary: dict[str, Any] = {"images": len(by_image), "rows": len(rows), "invalid_rows": invalid,
                                   "present": 0, "pulled": 0, "built": 0, "unavailable": dict(no_image)}
        try:
            try:
                free, root = await asyncio.to_thread(env.images.free_disk_gb)
                summary["free_disk_gb"], summary["image_store"] = round(free, 1), root
            except Exception as exc:  # noqa: BLE001 - reported below per image as well
                summary["free_disk_gb"] = None
                summary["engine_error"] = str(exc)
            for image, image_rows in by_image.items():
                if progress is not None:
                    progress.set_postfix_str(image[-60:])
                try:
                    _, state = await env.ensure_image(image_rows[0], pull=True)
                    summary[state] += 1
                except ImageUnavailable as exc:
                    summary["unavailable"][image] = str(exc)
                if progress is not None:
                    progress.update(len(image_rows))
        finally:
            await env.close()
        if summary["unavailable"]:
            lines = "\n".join(f"  {ref}: {why}" for ref, why in summary["unavailable"].items())
            print(f"{len(summary['unavailable'])} of {len(by_image)} images cannot be had:\n{lines}", file=sys.stderr)
            raise SystemExit(f"envs prepare {cls.name}: {len(summary['unavailable'])} image(s) unavailable (see above)")
        return summary
