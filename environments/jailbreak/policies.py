"""Response-policy checks (``policies.yaml``): typed, validated once at server start."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

SAFETY = "safety"  # the environment's own safety check, usable in any policy


class PolicyCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_template: str = Field(description="Placeholders {adversarial_prompt} {model_response}.")
    positive: str
    negative: str
    reward_positive: float = 1.0
    reward_negative: float = 0.0


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checks: list[str] = Field(min_length=1)
    combination: Literal["product", "average", "single"] = "product"


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checks: dict[str, PolicyCheck]
    policies: dict[str, Policy]

    @model_validator(mode="after")
    def _checks_exist(self) -> "PolicyFile":
        for name, policy in self.policies.items():
            unknown = [c for c in policy.checks if c != SAFETY and c not in self.checks]
            if unknown:
                raise ValueError(f"policy {name!r} names unknown checks {unknown}; known: {[SAFETY, *self.checks]}")
        return self


def load_policies(path: Path) -> PolicyFile:
    if not path.is_file():
        raise FileNotFoundError(f"policies file {path} does not exist")
    return PolicyFile.model_validate(yaml.safe_load(path.read_text()) or {})


def combine(combination: str, rewards: list[float]) -> float:
    if combination == "single":
        return rewards[0]
    if combination == "average":
        return sum(rewards) / len(rewards)
    return math.prod(rewards)
