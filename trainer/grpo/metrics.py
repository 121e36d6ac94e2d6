"""Per-step metrics: combine loss stats across microbatches, write JSONL / wandb / TensorBoard.

Names follow NeMo-RL's prefixes (reference §6): ``train/``, ``timing/train/``, ``performance/``,
``validation/``, ``async/``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch


def multi_turn_metrics(samples: list[Any], prefix: str) -> dict[str, float]:
    """How multi-turn the samples were: tool calls the model wrote (counted when the episode parsed
    them), model turns (1 + the environment-token spans between them) and environment tokens (tool
    outputs and turn markers, masked out of the loss) per sample. One turn for single-turn samples."""
    n = max(len(samples), 1)
    env_tokens = turns = calls = 0
    for s in samples:
        mask = s.gen_mask or []
        env_tokens += sum(1 for m in mask if m == 0)
        turns += 1 + sum(1 for a, b in zip(mask, mask[1:]) if a == 0 and b == 1)
        calls += s.tool_calls
    return {f"{prefix}/tool_calls_per_sample": calls / n, f"{prefix}/turns_per_sample": turns / n,
            f"{prefix}/env_tokens_per_sample": env_tokens / n}


class StepStats:
    """Sums and extrema of :func:`trainer.grpo.loss.clipped_pg_loss` stats over microbatches."""

    _MIN = ("ratio_min", "is_ratio_min")
    _MAX = ("ratio_max", "is_ratio_max")

    def __init__(self) -> None:
        self.acc: dict[str, float] = {}

    def add(self, stats: dict[str, torch.Tensor]) -> None:
        empty = float(stats["tokens"]) == 0
        for k, v in stats.items():
            x = float(v)
            if k in self._MIN or k in self._MAX:
                if empty:
                    continue
                f = min if k in self._MIN else max
                self.acc[k] = f(self.acc.get(k, x), x)
            else:
                self.acc[k] = self.acc.get(k, 0.0) + x

    def summary(self) -> dict[str, float]:
        a, n = self.acc, max(self.acc.get("tokens", 0.0), 1.0)
        return {
            "train/clip_fraction_low": a.get("clip_low_sum", 0) / n,
            "train/clip_fraction_high": a.get("clip_high_sum", 0) / n,
            "train/probs_ratio": a.get("ratio_sum", 0) / n,
            "train/probs_ratio_min": a.get("ratio_min", 1.0), "train/probs_ratio_max": a.get("ratio_max", 1.0),
            "train/sampling_importance_ratio": a.get("is_ratio_sum", 0) / n,
            "train/sampling_importance_ratio_min": a.get("is_ratio_min", 1.0),
            "train/sampling_importance_ratio_max": a.get("is_ratio_max", 1.0),
            "train/mismatch_kl": a.get("mismatch_kl_sum", 0) / n,
            "train/token_mult_prob_error": a.get("token_mult_prob_error_sum", 0) / n,
            "train/is_oob_ratio": a.get("is_oob_num", 0) / max(a.get("is_oob_den", 0), 1.0),
            "train/kl_penalty": a.get("kl_penalty_sum", 0) / n,
        }


def _clean(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


class MetricsLogger:
    """JSONL always; wandb when ``logger.wandb_enabled`` (offline mode needs no network);
    TensorBoard when ``logger.tensorboard_enabled``."""

    def __init__(self, log_dir: str | Path, *, wandb_enabled: bool = False, wandb_project: str = "verigym",
                 wandb_name: str | None = None, wandb_mode: str = "offline", tensorboard_enabled: bool = False,
                 config: dict[str, Any] | None = None):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        self._fh = self.path.open("a")
        self._wandb = None
        self._tb = None
        if wandb_enabled:
            import wandb

            os.environ.setdefault("WANDB_SILENT", "true")
            self._wandb = wandb.init(project=wandb_project, name=wandb_name, mode=wandb_mode,
                                     dir=str(self.dir), config=config or {}, reinit="finish_previous")
        if tensorboard_enabled:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.dir / "tensorboard"))

    def truncate(self) -> None:
        self._fh.close()
        self._fh = self.path.open("w")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        numeric = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)
        if self._tb is not None:
            for k, v in numeric.items():
                self._tb.add_scalar(k, v, step)

    def close(self) -> None:
        self._fh.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._tb is not None:
            self._tb.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


LAG_KEYS = ("async/lag_mean", "async/lag_max", "async/token_lag_mean", "async/token_lag_max",
             "async/mixed_version_samples_frac")


def lag_summary(lags: list[dict[str, float]]) -> dict[str, float]:
    """The run's policy lag: mean/max over steps of the group lag (trained step - version that started
    the group) and token lag (trained step - version that sampled the token), and the share of samples
    whose tokens came from more than one weight version (what in-flight updates produce)."""
    if not lags:
        return {}
    mean = lambda k: round(sum(x[k] for x in lags) / len(lags), 3)  # noqa: E731
    return {"group_lag_mean": mean("async/lag_mean"), "group_lag_max": max(x["async/lag_max"] for x in lags),
            "token_lag_mean": mean("async/token_lag_mean"), "token_lag_max": max(x["async/token_lag_max"] for x in lags),
            "mixed_version_samples_frac": mean("async/mixed_version_samples_frac"),
            "steps_with_mixed_versions": sum(x["async/mixed_version_samples_frac"] > 0 for x in lags)}
