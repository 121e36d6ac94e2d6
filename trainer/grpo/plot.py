"""The reward-curve PNG written at the end of a run (matplotlib, Agg: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_reward_curve(rows: list[dict[str, Any]], out: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["step"], r["train/reward"]) for r in rows if r.get("train/reward") is not None]
    val = [(r["step"], r["validation/reward"]) for r in rows if r.get("validation/reward") is not None]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train), label="train reward (sampled)", alpha=0.7)
    if val:
        ax.plot(*zip(*val), "o-", label="validation reward (greedy)")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
