"""scripts/record_nemo_rl_schema.py on a small tree shaped like NeMo-RL's config classes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FILES = {
    "nemo_rl/__init__.py": "",
    "nemo_rl/models/__init__.py": "",
    "nemo_rl/models/generation/__init__.py": "",
    "nemo_rl/models/generation/interfaces.py": '''
from typing import NotRequired, TypedDict
class GenerationConfig(TypedDict):
    backend: str
    max_new_tokens: int
''',
    "nemo_rl/models/generation/vllm_config.py": '''
from typing import TypedDict
from nemo_rl.models.generation.interfaces import GenerationConfig
class VllmSpecificArgs(TypedDict):
    tensor_parallel_size: int
class VllmConfig(GenerationConfig):
    vllm_cfg: VllmSpecificArgs
''',
    "nemo_rl/models/policy/__init__.py": '''
from typing import Literal, NotRequired, TypedDict
from nemo_rl.models.generation.interfaces import GenerationConfig
class MegatronConfigDisabled(TypedDict):
    enabled: Literal[False]
class MegatronConfig(TypedDict):
    enabled: Literal[True]
    tensor_model_parallel_size: int
    recompute_granularity: NotRequired[Literal["full", "selective"]]
class PolicyConfig(TypedDict):
    model_name: str
    precision: "str | None"
    megatron_cfg: NotRequired[MegatronConfig | MegatronConfigDisabled]
    generation: NotRequired[GenerationConfig]
''',
    "nemo_rl/setup.py": 'def f(cfg):\n    return cfg["megatron_cfg"]["moe_router_dtype"]\n',
    "nemo_rl/algorithms/__init__.py": "",
    "nemo_rl/algorithms/grpo.py": '''
from typing import Any, Optional
from pydantic import BaseModel, Field
from nemo_rl.models.policy import PolicyConfig
class AsyncGRPOConfig(BaseModel, extra="allow"):
    enabled: bool = False
class GRPOConfig(BaseModel, extra="allow"):
    num_prompts_per_step: int = 32
    advantage_clip_low: float | None = None
    async_grpo: Optional[AsyncGRPOConfig] = Field(default_factory=AsyncGRPOConfig)
class MasterConfig(BaseModel, extra="allow"):
    policy: PolicyConfig
    grpo: GRPOConfig
    env: dict[str, Any]
''',
    "examples/configs/grpo_tiny.yaml": '''
policy:
  megatron_cfg:
    moe_router_dtype: fp32
    not_read_by_any_code: 1
''',
}


def test_recorder_reads_typeddicts_models_variants_and_code_read_keys(tmp_path):
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = tmp_path / "schema.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "record_nemo_rl_schema.py"), "--repo", str(tmp_path),
                           "--commit", "a" * 40, "--output", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    schema = json.loads(out.read_text())
    models = schema["models"]
    assert schema["nemo_rl"]["commit"] == "a" * 40 and schema["root"] == "nemo_rl.algorithms.grpo:MasterConfig"
    grpo = models["nemo_rl.algorithms.grpo:GRPOConfig"]["fields"]
    assert grpo["num_prompts_per_step"] == {"type": {"t": "int"}, "required": False}
    assert grpo["advantage_clip_low"]["type"] == {"t": "union", "of": [{"t": "float"}, {"t": "none"}]}
    policy = models["nemo_rl.models.policy:PolicyConfig"]["fields"]
    assert policy["model_name"]["required"] is True and policy["megatron_cfg"]["required"] is False
    assert policy["precision"]["type"] == {"t": "union", "of": [{"t": "str"}, {"t": "none"}]}  # string annotation
    assert [o["name"] for o in policy["megatron_cfg"]["type"]["of"]] == [
        "nemo_rl.models.policy:MegatronConfig", "nemo_rl.models.policy:MegatronConfigDisabled"]
    generation = [o["name"] for o in policy["generation"]["type"]["of"]]
    assert "nemo_rl.models.generation.vllm_config:VllmConfig" in generation  # backend subclasses are variants
    megatron = models["nemo_rl.models.policy:MegatronConfig"]["fields"]
    assert megatron["recompute_granularity"]["type"] == {"t": "literal", "values": ["full", "selective"]}
    assert megatron["moe_router_dtype"]["from_example"] == "examples/configs/grpo_tiny.yaml"  # read by code
    assert "not_read_by_any_code" not in megatron
    assert models["nemo_rl.algorithms.grpo:MasterConfig"]["fields"]["env"]["type"]["name"] == "env:EnvSection"
