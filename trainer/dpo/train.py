"""The DPO loop (NeMo-RL ``dpo_train``), in process on one device.

Setup: tokenise the pairs, then compute the frozen reference's logprob sums of every pair's two
completions ONCE (trainer.grpo.reference.ReferencePolicy over the initial weights) and keep only
those numbers: the loss needs nothing else from the reference (trainer/dpo/loss.py), so no
reference forward runs during training, in any epoch, and the cache is saved with each checkpoint
(a resumed run neither recomputes it nor needs the reference weights).

Per step: the next ``policy.train_global_batch_size`` pairs of this epoch's order (a permutation
seeded by ``dpo.seed`` and the epoch, so a resumed run sees the same order), microbatches of
``train_micro_batch_size`` pairs (chosen and rejected in the same forward), one optimizer step.
Metrics go to ``metrics.jsonl`` (+ wandb / TensorBoard) through the GRPO engine's logger;
checkpoints use the GRPO engine's atomic step folders.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.dpo.config import DPOMasterConfig, dpo_config_yaml
from trainer.dpo.loss import DPOLossWeights, PairBatch, dpo_loss
from trainer.dpo.preference_data import TokenizedPair, read_pairs, tokenize_pair
from trainer.grpo import checkpoint
from trainer.grpo.metrics import MetricsLogger
from trainer.grpo.reference import ReferencePolicy
from trainer.logprobs import forward_logprobs

CACHE_FILE = "reference_logprobs.json"
STAT_KEYS = ("loss", "preference_loss", "sft_loss", "accuracy", "rewards_chosen_mean", "rewards_rejected_mean",
             "reward_margin", "num_valid_samples")


class DPOError(ValueError):
    pass


@dataclass
class _Sequence:  # the two fields forward_logprobs reads
    prompt_ids: list[int]
    gen_ids: list[int]


def _sequences(pairs: list[TokenizedPair]) -> list[_Sequence]:
    """chosen, rejected, chosen, rejected, ... (NeMo-RL interleaves them the same way)."""
    return [_Sequence(p.prompt_ids, ids) for p in pairs for ids in (p.chosen_ids, p.rejected_ids)]


def completion_logprob_sums(model: Any, pairs: list[TokenizedPair], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[P] sums of the chosen / rejected completions' token logprobs (gradient flows when enabled)."""
    seqs = _sequences(pairs)
    lp, _ = forward_logprobs(model, seqs, 1.0, pad_id)
    sums = (lp * completion_mask(seqs, lp.shape[1]).to(lp.device, lp.dtype)).sum(-1)
    return sums[0::2], sums[1::2]


def completion_mask(seqs: list[_Sequence], width: int) -> torch.Tensor:
    """[B, width] 1 on each sequence's completion tokens: a shorter completion of a microbatch
    never sums positions past its own end."""
    lengths = torch.tensor([len(s.gen_ids) for s in seqs])
    return (torch.arange(width)[None, :] < lengths[:, None]).float()


def reference_sums(reference: ReferencePolicy, pairs: list[TokenizedPair], pad_id: int,
                   micro_batch: int) -> dict[str, list[float]]:
    """``{pair digest: [chosen sum, rejected sum]}`` under the frozen reference."""
    seqs = _sequences(pairs)
    width = max((len(s.gen_ids) for s in seqs), default=1)
    lp = reference.logprobs(seqs, 1.0, pad_id, 2 * micro_batch, width)
    sums = (lp * completion_mask(seqs, width)).sum(-1).tolist()
    return {p.digest: [sums[2 * i], sums[2 * i + 1]] for i, p in enumerate(pairs)}


def loss_weights(cfg: DPOMasterConfig) -> DPOLossWeights:
    d = cfg.dpo
    return DPOLossWeights(reference_policy_kl_penalty=d.reference_policy_kl_penalty,
                          preference_loss_weight=d.preference_loss_weight, sft_loss_weight=d.sft_loss_weight,
                          preference_average_log_probs=d.preference_average_log_probs,
                          sft_average_log_probs=cfg.sft_average_log_probs)


def pair_batch(pairs: list[TokenizedPair], cache: dict[str, list[float]], pol_c: torch.Tensor,
               pol_r: torch.Tensor) -> PairBatch:
    dev = pol_c.device
    ref = torch.tensor([cache[p.digest] for p in pairs], dtype=pol_c.dtype, device=dev)
    return PairBatch(policy_chosen=pol_c, policy_rejected=pol_r, reference_chosen=ref[:, 0], reference_rejected=ref[:, 1],
                     tokens_chosen=torch.tensor([float(len(p.chosen_ids)) for p in pairs], device=dev),
                     tokens_rejected=torch.tensor([float(len(p.rejected_ids)) for p in pairs], device=dev),
                     pair_mask=torch.ones(len(pairs), device=dev))


def train_step(model: Any, optimizer: torch.optim.Optimizer, batch: list[TokenizedPair], cache: dict[str, list[float]],
               cfg: DPOMasterConfig, pad_id: int) -> dict[str, float]:
    t0 = time.perf_counter()
    w, mb = loss_weights(cfg), cfg.policy.train_micro_batch_size
    model.train()
    optimizer.zero_grad(set_to_none=True)
    totals = dict.fromkeys(STAT_KEYS, 0.0)
    for i in range(0, len(batch), mb):
        part = batch[i:i + mb]
        pol_c, pol_r = completion_logprob_sums(model, part, pad_id)
        loss, stats = dpo_loss(pair_batch(part, cache, pol_c, pol_r), w, float(len(batch)))
        loss.backward()
        for k in STAT_KEYS:
            totals[k] += stats[k]
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.policy.max_grad_norm or float("inf"))
    optimizer.step()
    model.eval()
    return {**{f"train/{k}": v for k, v in totals.items()}, "train/grad_norm": float(grad_norm),
            "train/lr": optimizer.param_groups[0]["lr"], "timing/train/policy_training": time.perf_counter() - t0}


@torch.no_grad()
def evaluate_pairs(model: Any, pairs: list[TokenizedPair], cache: dict[str, list[float]], cfg: DPOMasterConfig,
                   pad_id: int) -> dict[str, float]:
    """Loss and preference metrics over ``pairs`` (no update), NeMo-RL's DPO validation."""
    w, mb = loss_weights(cfg), cfg.dpo.val_micro_batch_size
    totals = dict.fromkeys(STAT_KEYS, 0.0)
    for i in range(0, len(pairs), mb):
        part = pairs[i:i + mb]
        pol_c, pol_r = completion_logprob_sums(model, part, pad_id)
        _, stats = dpo_loss(pair_batch(part, cache, pol_c, pol_r), w, float(len(pairs)))
        for k in STAT_KEYS:
            totals[k] += stats[k]
    return totals


def load_dpo_policy(cfg: DPOMasterConfig) -> Any:
    from trainer.policy import Policy, PolicyConfig, TinyModelConfig

    p = cfg.policy
    kw: dict[str, Any] = {"model_name": p.model_name, "seed": cfg.dpo.seed, "precision": p.precision}
    if p.hf_config_overrides:
        if p.model_name != "tiny":
            raise DPOError("policy.hf_config_overrides applies to policy.model_name=tiny only")
        kw["tiny"] = TinyModelConfig(**p.hf_config_overrides)
    return Policy.load(PolicyConfig(**kw))


def _tokenize(policy: Any, path: str, split: Any, limit: int, what: str) -> tuple[list[TokenizedPair], int]:
    pairs = [tokenize_pair(policy, p) for p in read_pairs(path, prompt_key=split.prompt_key, chosen_key=split.chosen_key,
                                                          rejected_key=split.rejected_key)]
    kept = [p for p in pairs if p.length <= limit]
    if not kept:
        raise DPOError(f"{path}: every {what} pair is longer than policy.max_total_sequence_length={limit}")
    return kept, len(pairs) - len(kept)


def _order(n: int, epoch: int, cfg: DPOMasterConfig) -> list[int]:
    order = list(range(n))
    if cfg.data.shuffle:
        random.Random(cfg.dpo.seed * 1_000_003 + epoch).shuffle(order)
    return order


def _validate(cfg: DPOMasterConfig, policy: Any, val_pairs: list[TokenizedPair], cache: dict[str, list[float]],
              tool_rows: list[dict[str, Any]]) -> dict[str, Any]:
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if val_pairs:
        n = cfg.dpo.val_batches * cfg.dpo.val_global_batch_size if cfg.dpo.val_batches > 0 else len(val_pairs)
        out.update({f"validation/{k}": v for k, v in evaluate_pairs(policy.model, val_pairs[:n], cache, cfg,
                                                                     policy.tokenizer.pad_token_id).items()})
    if tool_rows:
        from trainer.dpo.hallucination_eval import hallucination_rate
        from trainer.rollout.generator import SamplingParams

        g, h = cfg.policy.generation, cfg.data.hallucination_eval
        temperature = g.val_temperature if g.val_temperature is not None else g.temperature
        rates = hallucination_rate(policy, tool_rows, num_generations=h.num_generations, seed=cfg.dpo.seed,
                                   params=SamplingParams(temperature, g.top_p, g.max_new_tokens, tuple(g.stop_strings or ())),
                                   max_total_sequence_length=cfg.policy.max_total_sequence_length)
        out.update({f"validation/{k}": v for k, v in rates.items() if isinstance(v, (int, float))})
    out["timing/validation/total"] = time.perf_counter() - t0
    return out


def _optimizer(cfg: DPOMasterConfig, model: Any) -> torch.optim.Optimizer:
    o = cfg.policy.optimizer
    cls = {"torch.optim.AdamW": torch.optim.AdamW, "torch.optim.Adam": torch.optim.Adam,
           "torch.optim.SGD": torch.optim.SGD}[o.name]
    kw = dict(o.kwargs)
    if "betas" in kw:
        kw["betas"] = tuple(kw["betas"])
    return cls(model.parameters(), **kw)


def run_dpo(cfg: DPOMasterConfig, *, resume: bool = True) -> dict[str, Any]:
    """Train; returns the summary written to ``<log_dir>/summary.json``."""
    from trainer.progress import progress

    t_start = time.perf_counter()
    random.seed(cfg.dpo.seed)
    torch.manual_seed(cfg.dpo.seed)
    policy = load_dpo_policy(cfg)
    pad = policy.tokenizer.pad_token_id
    limit = cfg.policy.max_total_sequence_length
    if not cfg.data.train.data_path:
        raise DPOError("set data.train.data_path (a preference pairs JSONL)")
    train, dropped = _tokenize(policy, cfg.data.train.data_path, cfg.data.train, limit, "train")
    val, val_dropped = (_tokenize(policy, cfg.data.validation.data_path, cfg.data.validation, limit, "validation")
                        if cfg.data.validation and cfg.data.validation.data_path else ([], 0))
    tool_rows: list[dict[str, Any]] = []
    if cfg.data.hallucination_eval:
        h = cfg.data.hallucination_eval
        tool_rows = [json.loads(x) for x in Path(h.data_path).read_text().splitlines() if x.strip()][: h.max_rows]
    gbs = cfg.policy.train_global_batch_size
    steps_per_epoch = len(train) // gbs  # drop_last, as NeMo-RL's train dataloader
    if steps_per_epoch == 0:
        raise DPOError(f"policy.train_global_batch_size={gbs} is more than the {len(train)} training pairs; lower it")
    total_steps = min(cfg.dpo.max_num_steps, cfg.dpo.max_num_epochs * steps_per_epoch)

    log_dir = Path(cfg.logger.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "config.yaml").write_text(dpo_config_yaml(cfg))
    ckpt_root = Path(cfg.checkpointing.checkpoint_dir or log_dir / "checkpoints")
    optimizer = _optimizer(cfg, policy.model)
    logger = MetricsLogger(log_dir, wandb_enabled=cfg.logger.wandb_enabled, wandb_project=cfg.logger.wandb.project,
                           wandb_name=cfg.logger.wandb.name, wandb_mode=cfg.logger.wandb.mode,
                           tensorboard_enabled=cfg.logger.tensorboard_enabled, config=cfg.model_dump(mode="json"))
    found = checkpoint.latest(ckpt_root) if (resume and cfg.checkpointing.enabled) else None
    start, cache = 0, {}
    t_ref = time.perf_counter()
    if found:
        path, state = found
        checkpoint.load_trainer_state(path, policy.model, optimizer)
        start = state["step"]
        cache = json.loads((path / CACHE_FILE).read_text())
        missing = [p for p in train + val if p.digest not in cache]
        if missing:
            raise DPOError(f"{len(missing)} pairs are not in {path / CACHE_FILE}: the pairs changed since that "
                           "checkpoint; rerun with --no-resume (or another logger.log_dir)")
        print(f"resumed from {path} at step {start} (reference logprobs from the checkpoint)", flush=True)
    else:
        logger.truncate()
        reference = ReferencePolicy(policy.model)  # the initial weights, frozen
        cache = reference_sums(reference, train + val, pad, cfg.policy.train_micro_batch_size)
        del reference
    setup = {"data/train_pairs": len(train), "data/validation_pairs": len(val),
             "data/pairs_over_max_length": dropped + val_dropped, "data/tool_rows": len(tool_rows),
             "timing/reference_logprobs": time.perf_counter() - t_ref if not found else 0.0}
    ref_note = "loaded from the checkpoint" if found else f"computed once in {setup['timing/reference_logprobs']:.1f}s"
    print(f"DPO: {len(train)} train pairs ({dropped} over max length left out), {len(val)} validation pairs, "
          f"{total_steps} steps of {gbs} pairs ({steps_per_epoch} per epoch); reference logprobs {ref_note}", flush=True)
    history: list[dict[str, Any]] = []
    if start == 0:
        logger.log(setup, 0)
        if cfg.dpo.val_at_start:
            v = _validate(cfg, policy, val, cache, tool_rows)
            logger.log(v, 0)
            history.append({"step": 0, **v})
    bar = progress(total_steps, initial=start, desc="DPO", unit="step", enabled=cfg.logger.progress_bar)
    m: dict[str, Any] = {}
    for step in range(start, total_steps):
        t0 = time.perf_counter()
        epoch, index = divmod(step, steps_per_epoch)
        order = _order(len(train), epoch, cfg)
        batch = [train[i] for i in order[index * gbs:(index + 1) * gbs]]
        m = train_step(policy.model, optimizer, batch, cache, cfg, pad)
        m["train/epoch"] = epoch
        done = step + 1 == total_steps
        if (cfg.dpo.val_period > 0 and (step + 1) % cfg.dpo.val_period == 0) or (done and cfg.dpo.val_at_end):
            v = _validate(cfg, policy, val, cache, tool_rows)
            m.update(v)
            history.append({"step": step + 1, **v})
        m["timing/train/total_step_time"] = time.perf_counter() - t0
        logger.log(m, step + 1)
        bar.set_postfix(loss=f"{m['train/loss']:.3f}", acc=f"{m['train/accuracy']:.2f}",
                        margin=f"{m['train/reward_margin']:.2f}", refresh=False)
        bar.update(1)
        if cfg.checkpointing.enabled and ((step + 1) % cfg.checkpointing.save_period == 0 or done):
            stage = checkpoint.staging_dir(ckpt_root, step + 1)
            checkpoint.save_trainer_state(stage, policy.model, optimizer if cfg.checkpointing.save_optimizer else None,
                                          tokenizer=policy.tokenizer)
            (stage / CACHE_FILE).write_text(json.dumps(cache))
            checkpoint.finalize(ckpt_root, stage, step + 1, {"step": step + 1, "epoch": epoch}, cfg.checkpointing.keep_top_k)
    bar.close()
    logger.close()
    summary = {"steps": total_steps, "resumed_from": start, **setup,
               "final_train": {k: m.get(k) for k in m if k.startswith("train/")},
               "validation": history, "wall_seconds": round(time.perf_counter() - t_start, 1)}
    (log_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
