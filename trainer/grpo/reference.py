"""The reference policy of the KL penalty (``loss_fn.reference_policy_kl_penalty``).

NeMo-RL keeps a frozen copy of the policy it started RL from and adds
``beta * KL(pi || pi_ref)`` to the loss (reference §1.2 step 5). Here the reference is a deep
copy of the trainer's model taken when RL starts — after the supervised warm start, so the
penalty holds the policy near the model RL began from, not near random init — and saved with
every checkpoint so a resumed run keeps penalising against the same weights.

Its logprobs are computed per training batch, in microbatches, with no gradient.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from trainer.logprobs import forward_logprobs

REFERENCE_FILE = "reference.safetensors"


class ReferencePolicy:
    def __init__(self, model: torch.nn.Module):
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def logprobs(self, samples: list[Any], temperature: float, pad_id: int, micro_batch: int, width: int,
                 prompt_of: list[int] | None = None) -> torch.Tensor:
        """[B, width] logprobs of each sample's generated tokens under the reference (0 past a sample's
        end); ``prompt_of``: which samples share a prompt (trainer.logprobs.forward_logprobs)."""
        out = torch.zeros(len(samples), width)
        for i in range(0, len(samples), micro_batch):
            lp, _ = forward_logprobs(self.model, samples[i:i + micro_batch], temperature, pad_id,
                                     prompt_of=None if prompt_of is None else prompt_of[i:i + micro_batch])
            out[i:i + micro_batch, :lp.shape[1]] = lp.to(out.device)
        return out

    def save(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        state = {k: v.detach().clone().contiguous() for k, v in self.model.state_dict().items()}
        save_file(state, str(Path(folder) / REFERENCE_FILE))

    @classmethod
    def load(cls, model: torch.nn.Module, folder: str | Path) -> "ReferencePolicy | None":
        """The reference saved in a checkpoint folder, shaped like ``model``; None when it has none."""
        from safetensors.torch import load_file

        path = Path(folder) / REFERENCE_FILE
        if not path.exists():
            return None
        ref = cls(model)
        ref.model.load_state_dict(load_file(str(path)))
        return ref
