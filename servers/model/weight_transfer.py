"""The receiving side of vLLM's weight-transfer protocol, for ``envs model serve``.

vLLM's four phases (docs/training/weight_transfer in vLLM; HTTP routes in its dev RLHF router):
``init_weight_transfer_engine`` once, then per update ``start_weight_update`` -> one or more
``update_weights`` -> ``finish_weight_update`` (which may commit a ``weight_version`` label).
Calling them out of order is a 409, as in vLLM. Two backends, chosen at start
(``--weight-transfer-config '{"backend": ...}'``, vLLM's flag):

* ``disk`` — vLLM's shared-disk backend: ``update_info = {"path": "/abs/dir"}``, a directory of
  safetensors files with the model's parameter names (what ``save_pretrained`` or
  ``safetensors.torch.save_file(model.state_dict())`` write). Works on any device; on one machine
  a tmpfs directory (``/dev/shm``) makes it a memory copy. Every file is read and checked (names,
  shapes, every parameter present) before anything is copied, then all of it is copied between two
  decode steps: an update is applied whole or not at all.
* ``ipc`` — vLLM's CUDA IPC backend, for a trainer on the same GPU: ``update_info`` carries
  ``names``, ``dtype_names``, ``shapes`` and ``ipc_handles_pickled`` (base64 of a pickled list of
  ``{gpu_uuid: (rebuild_fn, args)}``, what ``torch.multiprocessing.reductions.reduce_tensor``
  gives). Unpickling runs code from the request, so — as in vLLM — it is refused unless the server
  runs with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (bind to loopback). The weights are copied out
  of the trainer's memory before ``/update_weights`` answers (the trainer may free them after).
  Tested on a GPU only (tests/model_server/test_ipc_transfer_cuda.py; CI has none).
"""

from __future__ import annotations

import base64
import os
import pickle
from pathlib import Path
from typing import Any

import torch

from servers.model.engine import DecodeEngine

BACKENDS = ("disk", "ipc")
INSECURE_ENV = "VLLM_ALLOW_INSECURE_SERIALIZATION"


class WeightTransferError(Exception):
    """A refused weight-transfer call: ``status`` 400 (bad payload), 409 (out of order), 501 (no backend)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class WeightTransfer:
    def __init__(self, engine: DecodeEngine, backend: str):
        if backend not in BACKENDS:
            raise ValueError(f"weight-transfer backend {backend!r}: choose {' or '.join(BACKENDS)}")
        self.engine, self.backend = engine, backend
        self.initialized = False
        self.updating = False
        self.updates = 0  # finished updates (metrics)
        self.tensors_loaded = 0

    def init(self, init_info: dict[str, Any]) -> None:
        if not isinstance(init_info, dict):
            raise WeightTransferError("init_info must be an object")
        if self.backend == "ipc":
            extra = set(init_info) - {"packed"}
            if init_info.get("packed"):
                raise WeightTransferError("packed IPC transfers are not supported by this server; send packed=false")
        else:
            extra = set(init_info)
        if extra:
            raise WeightTransferError(f"unknown init_info keys for the {self.backend} backend: {sorted(extra)}")
        self.initialized = True

    def start(self) -> None:
        if self.updating:
            raise WeightTransferError("start_weight_update called while a weight update is already in progress; "
                                      "call POST /finish_weight_update first", status=409)
        self.updating = True

    def update(self, update_info: dict[str, Any]) -> None:
        if not self.updating:
            raise WeightTransferError("update_weights requires a preceding start_weight_update; call POST "
                                      "/start_weight_update first", status=409)
        if not isinstance(update_info, dict):
            raise WeightTransferError("update_info must be an object")
        tensors = self._read_disk(update_info) if self.backend == "disk" else self._read_ipc(update_info)
        self.engine.load_weights(tensors)
        self.tensors_loaded += len(tensors)

    def finish(self, weight_version: Any = None) -> None:
        if not self.updating:
            raise WeightTransferError("finish_weight_update called without a preceding start_weight_update",
                                      status=409)
        if weight_version is not None and not isinstance(weight_version, str):
            raise WeightTransferError("weight_version must be a string")
        self.updating = False
        self.updates += 1
        if weight_version is not None:
            with self.engine.lock:
                self.engine.weight_version = weight_version

    # ---- disk ------------------------------------------------------------------------------
    def _read_disk(self, info: dict[str, Any]) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        if set(info) != {"path"}:
            raise WeightTransferError('the disk backend takes update_info {"path": "/absolute/checkpoint/dir"}')
        path = info["path"]
        if not isinstance(path, str) or not os.path.isabs(path):
            raise WeightTransferError("path must be an absolute directory path")
        files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
        if not files:
            raise WeightTransferError(f"{path} is not a directory holding .safetensors files")
        tensors: dict[str, torch.Tensor] = {}
        for f in files:
            try:
                tensors.update(load_file(str(f)))
            except Exception as exc:  # noqa: BLE001 - a torn or foreign file is the caller's to fix
                raise WeightTransferError(f"cannot read {f.name}: {type(exc).__name__}: {exc}") from None
        return self._checked(tensors, require_all=True)

    # ---- ipc -------------------------------------------------------------------------------
    def _read_ipc(self, info: dict[str, Any]) -> dict[str, torch.Tensor]:
        keys = {"names", "dtype_names", "shapes", "ipc_handles_pickled"}
        if not keys <= set(info) or set(info) - keys - {"packed", "is_checkpoint_format"}:
            raise WeightTransferError(f"the ipc backend takes update_info with {sorted(keys)}")
        if info.get("packed"):
            raise WeightTransferError("packed IPC transfers are not supported by this server")
        if os.environ.get(INSECURE_ENV) != "1":
            raise WeightTransferError(f"refusing to unpickle ipc_handles_pickled without {INSECURE_ENV}=1 on the server")
        if not torch.cuda.is_available() or self.engine.device.type != "cuda":
            raise WeightTransferError("the ipc backend needs the model on a CUDA device", status=501)
        names, shapes, handles = info["names"], info["shapes"], pickle.loads(base64.b64decode(info["ipc_handles_pickled"]))
        if not (len(names) == len(shapes) == len(info["dtype_names"]) == len(handles)):
            raise WeightTransferError("names, dtype_names, shapes and ipc handles differ in length")
        device = self.engine.device.index if self.engine.device.index is not None else torch.cuda.current_device()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        tensors = {}
        for name, shape, handle in zip(names, shapes, handles):
            if uuid not in handle:
                raise WeightTransferError(f"no IPC handle for this server's GPU {uuid} (have {sorted(handle)})")
            func, args = handle[uuid]
            args = list(args)
            args[6] = device  # rebuild_cuda_tensor's device index: the receiver's logical index
            tensor = func(*args)
            if list(tensor.shape) != list(shape):
                raise WeightTransferError(f"{name}: the handle's tensor is {list(tensor.shape)}, declared {shape}")
            tensors[name] = tensor.clone()  # out of the trainer's memory before we answer
        return self._checked(tensors, require_all=False)

    def _checked(self, tensors: dict[str, torch.Tensor], *, require_all: bool) -> dict[str, torch.Tensor]:
        """Names and shapes against the model's parameters; nothing is applied unless all pass."""
        expected = self.engine.parameter_shapes()
        aliases = set(self.engine.model.state_dict()) - set(expected)  # tied weights' second names
        unknown = sorted(n for n in tensors if n not in expected and n not in aliases)
        if unknown:
            raise WeightTransferError(f"{len(unknown)} tensor(s) the model does not have, e.g. {unknown[:3]}")
        tensors = {n: t for n, t in tensors.items() if n in expected}
        wrong = [f"{n}: {list(t.shape)} != {list(expected[n][0])}" for n, t in tensors.items()
                 if t.shape != expected[n][0]]
        if wrong:
            raise WeightTransferError(f"shape mismatch: {'; '.join(wrong[:3])}")
        missing = sorted(set(expected) - set(tensors)) if require_all else []
        if missing:
            raise WeightTransferError(f"the checkpoint lacks {len(missing)} parameter(s), e.g. {missing[:3]}")
        return tensors
