"""Instance images: which image a row needs, and making sure it is on this machine.

``container`` backend: image references (``swebench/sweb.eval.x86_64.<id>:latest``) looked
up, pulled or built through the Docker API (Docker or Podman's compatible service). An
image with a local recipe (``local_images`` in config: a build script, e.g. the tiny test
instance) is built instead of pulled. Pulls try each configured registry in order and
refuse to start when the image store's disk has less than ``min_free_disk_gb`` free.

``apptainer`` backend: references are SIF files; a missing one is pulled with
``apptainer pull`` from the registries when the binary is present.

This talks to the Docker API itself (the ``docker`` SDK, same endpoint rule as the
sandbox layer) because ``sandboxes`` exposes no image management; it never creates
containers.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

PODMAN_SOCKET = "/run/verigym-podman.sock"  # the endpoint scripts/ci_podman.sh serves


class ImageUnavailable(Exception):
    """The image cannot be had here (not present, pull/build failed, disk full). Message says why."""


def split_reference(ref: str) -> tuple[str, str]:
    """``repo[:tag]`` -> (repo, tag); digests and registry ports are kept in the repo part."""
    if "@" in ref:
        return ref, ""
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, "latest"


def has_registry(ref: str) -> bool:
    first = ref.split("/", 1)[0]
    return "/" in ref and ("." in first or ":" in first or first == "localhost")


def template_vars(row: Any, image_prefix: str, sif_dir: str) -> dict[str, str]:
    instance_id = str(getattr(row, "instance_id", ""))
    repo = str(getattr(row, "repo", "") or "")
    return {"instance_id": instance_id,
            # SWE-bench's Docker Hub names: "__" -> "_1776_", lower case
            "instance_id_1776": instance_id.replace("__", "_1776_").lower(),
            "repo": repo, "repo_slug": repo.replace("/", "__"), "version": str(getattr(row, "version", "") or ""),
            "image_prefix": image_prefix, "sif_dir": sif_dir}


class ContainerImages:
    def __init__(self, *, base_url: str | None, registries: list[str], local_images: dict[str, Path],
                 min_free_disk_gb: float, pull_timeout_s: float, build_timeout_s: float) -> None:
        if base_url is None and not os.environ.get("DOCKER_HOST") and os.path.exists(PODMAN_SOCKET):
            base_url = f"unix://{PODMAN_SOCKET}"
        self.base_url, self.registries, self.local_images = base_url, registries, local_images
        self.min_free_disk_gb, self.pull_timeout_s, self.build_timeout_s = min_free_disk_gb, pull_timeout_s, build_timeout_s
        self._client: Any = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._known: set[str] = set()  # present images: skip the API round trip next time

    def _docker(self) -> Any:
        if self._client is None:
            import docker  # noqa: PLC0415 - optional dependency, only for this backend
            self._client = (docker.DockerClient(base_url=self.base_url, timeout=int(self.pull_timeout_s))
                            if self.base_url else docker.from_env(timeout=int(self.pull_timeout_s)))
        return self._client

    def _exists(self, ref: str) -> bool:
        import docker  # noqa: PLC0415
        try:
            self._docker().images.get(ref)
            return True
        except docker.errors.ImageNotFound:
            return False

    async def exists(self, ref: str) -> bool:
        if ref in self._known:
            return True
        try:
            found = await asyncio.to_thread(self._exists, ref)
        except Exception as exc:  # daemon down, SDK missing
            raise ImageUnavailable(f"cannot query the container engine for {ref!r}: {exc}") from exc
        if found:
            self._known.add(ref)
        return found

    def free_disk_gb(self) -> tuple[float, str]:
        info = self._docker().info()
        root = (info.get("store") or info.get("Store") or {}).get("graphRoot") or info.get("DockerRootDir") or "/"
        while not os.path.exists(root):
            root = os.path.dirname(root)
        return shutil.disk_usage(root).free / 2**30, root

    async def ensure(self, ref: str, *, pull: bool = True, build: bool = True) -> str:
        """'present' | 'built' | 'pulled'; raises ImageUnavailable with every reason tried."""
        if await self.exists(ref):
            return "present"
        lock = self._locks.setdefault(ref, asyncio.Lock())
        async with lock:  # one pull/build per image, however many rows wait for it
            if await self.exists(ref):
                return "present"
            recipe = self.local_images.get(ref)
            if recipe is not None and build:
                await self._build(ref, recipe)
                return "built"
            if not pull:
                raise ImageUnavailable(f"image {ref!r} is not present on this machine and pulling at verify time is "
                                       "off (pull_missing_images): run `envs prepare swe --data ROWS.jsonl` first")
            await self._pull(ref)
            return "pulled"

    async def _build(self, ref: str, recipe: Path) -> None:
        proc = await asyncio.create_subprocess_exec("bash", str(recipe), stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=self.build_timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise ImageUnavailable(f"building {ref!r} with {recipe} took over {self.build_timeout_s:.0f} s") from None
        if proc.returncode != 0 or not await self.exists(ref):
            raise ImageUnavailable(f"building {ref!r} with {recipe} failed (exit {proc.returncode}): "
                                   f"{out.decode(errors='replace')[-800:]}")

    async def _pull(self, ref: str) -> None:
        try:
            free, root = await asyncio.to_thread(self.free_disk_gb)
        except Exception as exc:
            raise ImageUnavailable(f"cannot query the container engine for {ref!r}: {exc}") from exc
        if free < self.min_free_disk_gb:
            raise ImageUnavailable(f"not pulling {ref!r}: {free:.1f} GiB free under {root}, "
                                   f"min_free_disk_gb is {self.min_free_disk_gb}")
        candidates = [ref] if has_registry(ref) or not self.registries else [f"{r.rstrip('/')}/{ref}" for r in self.registries]
        errors = []
        for candidate in candidates:
            repo, tag = split_reference(candidate)
            try:
                image = await asyncio.to_thread(self._docker().images.pull, repo, tag=tag or None)
                if candidate != ref:
                    target_repo, target_tag = split_reference(ref)
                    await asyncio.to_thread(image.tag, target_repo, target_tag or None)
                self._known.add(ref)
                return
            except Exception as exc:  # try the next registry; report all at the end
                errors.append(f"{candidate}: {str(exc)[:300]}")
        raise ImageUnavailable(f"image {ref!r} is not present and could not be pulled: " + "; ".join(errors))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class SifImages:
    """SIF files for the apptainer backend; ``ensure`` pulls with ``apptainer pull`` if possible."""

    def __init__(self, *, registries: list[str], binary: str, pull_timeout_s: float) -> None:
        self.registries, self.binary = registries, binary
        self.pull_timeout_s = pull_timeout_s
        self._locks: dict[str, asyncio.Lock] = {}

    async def exists(self, ref: str) -> bool:
        return os.path.isfile(ref)

    def free_disk_gb(self) -> tuple[float, str]:
        return shutil.disk_usage("/").free / 2**30, "/"

    async def ensure(self, ref: str, *, pull: bool = True, build: bool = True, docker_ref: str | None = None) -> str:
        if os.path.isfile(ref):
            return "present"
        if not pull:
            raise ImageUnavailable(f"SIF image {ref!r} does not exist and pulling at verify time is off "
                                   "(pull_missing_images): run `envs prepare swe --data ROWS.jsonl` first")
        if shutil.which(self.binary) is None or not docker_ref:
            raise ImageUnavailable(f"SIF image {ref!r} does not exist and cannot be pulled here "
                                   f"({self.binary!r} {'not installed' if shutil.which(self.binary) is None else 'has no source reference'})")
        async with self._locks.setdefault(ref, asyncio.Lock()):
            if os.path.isfile(ref):
                return "present"
            Path(ref).parent.mkdir(parents=True, exist_ok=True)
            errors = []
            for registry in self.registries or [""]:
                source = f"docker://{registry.rstrip('/') + '/' if registry else ''}{docker_ref}"
                proc = await asyncio.create_subprocess_exec(self.binary, "pull", ref, source,
                                                            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
                try:
                    out, _ = await asyncio.wait_for(proc.communicate(), timeout=self.pull_timeout_s)
                except asyncio.TimeoutError:
                    proc.kill()
                    await proc.wait()
                    errors.append(f"{source}: timed out")
                    continue
                if proc.returncode == 0 and os.path.isfile(ref):
                    return "pulled"
                errors.append(f"{source}: {out.decode(errors='replace')[-300:]}")
            raise ImageUnavailable(f"SIF image {ref!r} could not be pulled: " + "; ".join(errors))

    def close(self) -> None:
        pass
