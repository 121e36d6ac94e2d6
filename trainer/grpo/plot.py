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
    envs = sorted({k.split("/", 2)[2] for r in rows for k in r if k.startswith("validation/reward/")})
    for env in envs if len(envs) > 1 else []:
        pts = [(r["step"], r[f"validation/reward/{env}"]) for r in rows if r.get(f"validation/reward/{env}") is not None]
        ax.plot(*zip(*pts), ".--", alpha=0.6, label=f"validation: {env}")
    warm = next((r for r in rows if r.get("warm_start/steps")), None)
    if warm:
        ax.set_title(f"step 0 = after a {warm['warm_start/steps']}-step supervised warm start", fontsize=9)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
