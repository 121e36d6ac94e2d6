"""Blend specs: ``blends/<name>.yaml`` -> a typed :class:`Blend` (see blends/README.md).

A blend says where rows come from (a Hugging Face dataset repo + file, local JSONL files,
or an environment's offline generator), how ``_hf_placeholder`` rows are resolved, how the
validation split is cut, extra ``agent_ref.name`` -> environment routes (environments declare their own),
and optional per-environment weights, curriculum and low-effort conversion.

Unknown keys are errors naming the closest valid key (a misspelt key silently ignored is
how an RL run trains on the wrong data for a week).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servers.config_loader import did_you_mean
from trainer.reasoning_control import ReasoningControl
from trainer.rollout.task import Routes

BLENDS_DIR = Path(__file__).resolve().parent.parent / "blends"

class BlendError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HubSource(_Strict):
    repo: str = Field(description="Hugging Face dataset repo, e.g. nvidia/Nemotron-3-Super-RL-Training-Blends")
    file: str = Field(description="File inside the repo, e.g. rlvr1.jsonl")
    revision: str | None = None


class GenerateSource(_Strict):
    env: str = Field(description="Environment whose offline generator makes the rows (envs generate ENV)")
    tasks: list[str] = Field(default_factory=list)
    size: int = 100
    seed: int = 0
    options: dict[str, Any] = Field(default_factory=dict, description="generator options (key=value of envs generate)")


class Source(_Strict):
    """Exactly one of ``hub``, ``path`` (local JSONL, relative to the blend file) or ``generate``."""

    name: str | None = None
    hub: HubSource | None = None
    path: str | None = None
    generate: GenerateSource | None = None
    default_agent: str | None = Field(None, description="agent_ref.name for rows of this source that lack one")

    @model_validator(mode="after")
    def _one_kind(self) -> "Source":
        kinds = [k for k in ("hub", "path", "generate") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"a source needs exactly one of hub/path/generate, got {kinds or 'none'}")
        return self

    def label(self) -> str:
        if self.hub:
            return f"hf://{self.hub.repo}/{self.hub.file}"
        if self.path:
            return self.path
        assert self.generate
        return f"generate:{self.generate.env}:{','.join(self.generate.tasks)}:size={self.generate.size}:seed={self.generate.seed}"


class Placeholders(_Strict):
    resolve: bool = Field(False, description="Resolve _hf_placeholder rows (RLVR blends only)")
    local_sources: dict[str, str] = Field(default_factory=dict,
                                          description="dataset name -> local file in the source's format (offline)")


class Split(_Strict):
    val_holdout: int | None = Field(100, description="Last N rows -> val (the Nemotron recipe: 100)")
    val_ratio: float | None = Field(None, ge=0.0, lt=1.0, description="Or a fraction of rows -> val (last rows)")
    train_ratio: float | None = Field(None, gt=0.0, le=1.0,
                                      description="Ratio split (the Nano recipe's data_prep.yaml): first train_ratio "
                                                  "-> train, next val_ratio -> val, the rest -> test.jsonl")
    shuffle_seed: int | None = Field(None, description="Shuffle rows before the split (null: keep file order)")

    @model_validator(mode="after")
    def _ratio_split(self) -> "Split":
        if self.train_ratio is None:
            return self
        if self.val_ratio is None:
            raise ValueError("split.train_ratio needs split.val_ratio (the rest goes to test)")
        if "val_holdout" in self.model_fields_set and self.val_holdout is not None:
            raise ValueError("split.val_holdout and split.train_ratio are two different splits: set one "
                             "(val_holdout: null to use the ratios)")
        if self.train_ratio + self.val_ratio > 1.0 + 1e-9:
            raise ValueError(f"split.train_ratio + split.val_ratio = {self.train_ratio + self.val_ratio:g} > 1")
        return self


class Curriculum(_Strict):
    max_pass_rate: float | None = Field(None, description="Drop train rows whose recorded pass rate is above this")
    pass_rate_key: str = "pass_rate"
    sort_by_difficulty: bool = Field(False, description="Order train rows easiest-first (descending pass rate), rows without one last")


class LowEffort(_Strict):
    """NeMo-RL effort levels (nemo-rl.md §1.4): a fraction of prompts gets ``low_string``
    appended to the last user message; NeMo-RL then shapes their reward by length."""

    fraction: float = Field(0.0, ge=0.0, le=1.0)
    envs: list[str] = Field(default_factory=lambda: ["math", "math_python", "mcqa", "code", "reasoning_gym"])
    low_string: str = "/lowthink"
    seed: int = 0


class AgentSettings(_Strict):
    """Settings of the NeMo-Gym agent that runs an environment's rollouts (``simple_agent``),
    written into the Gym fleet config by ``driver run --backend nemo-rl``."""

    max_steps: int | None = Field(None, ge=1, description="Most model turns per rollout (overrides the "
                                  "environment's declared max_steps; null: the environment's value)")


class Blend(_Strict):
    name: str
    description: str = ""
    sources: list[Source]
    placeholders: Placeholders = Field(default_factory=Placeholders)
    split: Split = Field(default_factory=Split)
    agent_map: dict[str, str] = Field(default_factory=dict)
    agent_settings: dict[str, AgentSettings] = Field(
        default_factory=dict, description="environment or agent name -> NeMo-Gym agent settings (an agent's own "
                                          "entry wins over its environment's)")
    default_env: str | None = Field(None, description="Env for rows without agent_ref (else the row is invalid)")
    weights: dict[str, float] = Field(default_factory=dict, description="env -> train-row multiplier (0.5 halves, 2 doubles)")
    curriculum: Curriculum = Field(default_factory=Curriculum)
    low_effort: LowEffort = Field(default_factory=LowEffort)
    reasoning_control: ReasoningControl = Field(default_factory=ReasoningControl)  # trainer/reasoning_control.py
    sample: int | None = Field(None, description="Keep only the first N rows (quick runs)")
    path: str | None = Field(None, exclude=True)

    @property
    def folder(self) -> Path:
        return Path(self.path).parent if self.path else BLENDS_DIR

    @property
    def agents(self) -> dict[str, str]:
        """Agent name -> environment: what the installed environments declare (their
        ``agent_names``, read through :mod:`trainer.env_catalog`), this blend's ``agent_map`` on top."""
        return dict(self.routes().agents)

    def routes(self, declared: Mapping[str, str] | None = None) -> Routes:
        """This blend's routes (:class:`trainer.rollout.task.Routes`, the one routing rule) over the
        agent names environments declare: ``declared`` (e.g. a served fleet's ``/info``), else the
        installed environments'."""
        if declared is None:
            from trainer.env_catalog import installed

            declared = installed().routes()
        return Routes({**declared, **self.agent_map}, self.default_env)


def _closest_key_errors(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            model = _model_at(err["loc"][:-1])
            valid = list(model.model_fields) if model else []
            key = str(err["loc"][-1])
            close = did_you_mean(key, valid, capital=True)
            hint = f" {close}" if close else _nested_hint(model, key)
            problems.append(f"unknown key {loc!r}.{hint} Valid keys here: {', '.join(valid)}")
        else:
            problems.append(f"{loc}: {err['msg']}")
    return "; ".join(problems)


def _nested_hint(model: type[BaseModel] | None, key: str) -> str:
    """A key written one level too high (``val_holdout:`` instead of ``split: {val_holdout:}``)."""
    for name in (model.model_fields if model else {}):
        inner = _model_at((name,)) if model is Blend else None
        if inner is not None and inner is not Blend:
            close = did_you_mean(key, inner.model_fields, cutoff=0.8, prefix=f"{name}.", capital=True)
            if close:
                return f" {close}"
    return ""


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: Any = Blend
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if model else None
        if field is None:
            return None
        ann = field.annotation
        for candidate in (ann, *getattr(ann, "__args__", ())):
            inner = getattr(candidate, "__args__", (candidate,))
            found = next((c for c in (candidate, *inner) if isinstance(c, type) and issubclass(c, BaseModel)), None)
            if found:
                model = found
                break
        else:
            return None
    return model


def available() -> list[str]:
    return sorted(p.stem for p in BLENDS_DIR.glob("*.yaml"))


def load_blend(name_or_path: str) -> Blend:
    """A blend by name (``blends/<name>.yaml``) or by path to a YAML file."""
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.exists()):
        path = BLENDS_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        close = did_you_mean(name_or_path, available(), n=2, quote=False, capital=True)
        hint = f" {close}" if close else ""
        raise BlendError(f"unknown blend {name_or_path!r}.{hint} Available: {', '.join(available())}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise BlendError(f"{path}: a blend is a mapping of keys")
    data.setdefault("name", path.stem)
    try:
        blend = Blend.model_validate(data)
    except ValidationError as exc:
        raise BlendError(f"{path}: {_closest_key_errors(exc)}") from None
    blend.path = str(path)
    return blend


