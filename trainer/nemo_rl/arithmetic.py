"""NeMo-RL's node arithmetic and the checks its code makes at start-up, made before submitting.

Read from NVIDIA-NeMo/RL @ 7ea279abfbeb (the same commit as schema.json), and unchanged in this
respect since v0.5.0:

- ``nemo_rl/algorithms/grpo.py`` ``setup``: ``cluster.num_nodes`` is what NeMo-RL trains **and**
  generates on. Training nodes = ``cluster.num_nodes`` - reward-model nodes - OPD teacher nodes -
  ``policy.generation.colocated.resources.num_nodes`` (non-colocated generation). The NeMo-Gym GPU
  nodes (``env.nemo_gym.num_gpu_nodes``) are **not** subtracted: they come on top, as do the
  environment fleet's nodes (NeMo-RL's Super guide: ``cluster.num_nodes`` 176 + 7 Gym nodes =
  ``SBATCH_NUM_NODES`` 183). With one policy node and non-colocated generation, the node is split:
  training GPUs = ``gpus_per_node`` - ``colocated.resources.gpus_per_node``.
- ``nemo_rl/models/policy/lm_policy.py``: the training world size must be divisible by
  PP x CP x TP (``ValueError`` at policy init); TP >= 4 needs ``train_micro_batch_size ==
  logprob_batch_size`` unless ``force_on_policy_ratio`` (which sets NRL_IGNORE_TP_ACCURACY_CHECK).
- ``nemo_rl/distributed/batched_data_dict.py`` ``shard_by_batch_size``: the step's samples divide
  into global batches, and a global batch divides over the data-parallel shards.
- ``grpo.py``: ``force_on_policy_ratio`` needs ``train_global_batch_size == num_prompts_per_step x
  num_generations_per_prompt``; async GRPO with vLLM needs non-colocated generation.
- ``examples/nemo_gym/run_grpo_nemo_gym.py``: ``grpo.max_val_samples`` null; in async mode no
  dynamic sampling, reward scaling or shaping, or multiple dataloaders.
- Megatron-Core (``parallel_state``): expert-parallel groups need the world size / PP divisible by
  EP x ETP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NodeRoles:
    """How a NeMo-RL job's Slurm nodes are used."""
    training: int             # NeMo-RL's training nodes (a fraction of one node when split: see training_gpus)
    generation: int           # non-colocated vLLM nodes (0: colocated, or sharing the one policy node)
    model_servers: int        # judge / GenRM model servers (the Gym GPU nodes), on top of cluster.num_nodes
    fleet: int                # environment-server-only nodes, on top
    gpus_per_node: int
    cluster_nodes: int        # cluster.num_nodes
    training_gpus: int        # NeMo-RL's training world size

    @property
    def total(self) -> int:
        """Slurm nodes: what NeMo-RL trains and generates on, plus the model servers, plus the fleet."""
        return self.cluster_nodes + self.model_servers + self.fleet

    def describe(self) -> str:
        split = "" if self.generation or self.training_gpus == self.training * self.gpus_per_node else \
            f" (one node: {self.training_gpus} training GPUs, {self.gpus_per_node - self.training_gpus} generation GPUs)"
        return (f"{self.total} x {self.gpus_per_node} GPUs = cluster.num_nodes {self.cluster_nodes} (training "
                f"{self.training}, generation {self.generation}{split}) + model servers {self.model_servers} "
                f"+ fleet {self.fleet}")


def get_path(cfg: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """``cfg['a']['b']['c']`` for ``'a.b.c'``; ``default`` where a part is missing."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _int(value: Any, default: int = 0) -> int:
    """An int from the config; an unresolved interpolation (``${...}``) counts as ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def node_roles(cfg: dict[str, Any], model_server_nodes: int = 0, fleet_nodes: int = 0) -> NodeRoles:
    total = _int(get_path(cfg, "cluster.num_nodes"), 1)
    gpus = _int(get_path(cfg, "cluster.gpus_per_node"), 8)
    colocated = bool(get_path(cfg, "policy.generation.colocated.enabled", True))
    rm = _int(get_path(cfg, "env.reward_model.resources.num_nodes"))
    policy_nodes = total if total == 1 else total - rm
    if colocated:
        return NodeRoles(policy_nodes, 0, model_server_nodes, fleet_nodes, gpus, total, policy_nodes * gpus)
    gen_nodes = _int(get_path(cfg, "policy.generation.colocated.resources.num_nodes"), 0)
    gen_gpus = _int(get_path(cfg, "policy.generation.colocated.resources.gpus_per_node"), 0)
    if policy_nodes == 1:  # one policy node, split between training and generation
        return NodeRoles(1, 0, model_server_nodes, fleet_nodes, gpus, total, gpus - gen_gpus)
    training = policy_nodes - gen_nodes
    return NodeRoles(training, gen_nodes, model_server_nodes, fleet_nodes, gpus, total, training * gpus)


def check(cfg: dict[str, Any]) -> list[str]:
    """Every start-up check of NeMo-RL's that the config would fail, one line each (why, where)."""
    problems: list[str] = []
    total = _int(get_path(cfg, "cluster.num_nodes"), 1)
    gpus = _int(get_path(cfg, "cluster.gpus_per_node"), 8)
    colocated = bool(get_path(cfg, "policy.generation.colocated.enabled", True))
    res = "policy.generation.colocated.resources"
    gen_nodes = get_path(cfg, f"{res}.num_nodes")
    gen_gpus = get_path(cfg, f"{res}.gpus_per_node")
    rm = _int(get_path(cfg, "env.reward_model.resources.num_nodes"))
    policy_nodes = total if total == 1 else total - rm
    if policy_nodes < 1:
        problems.append(f"cluster.num_nodes={total} leaves no policy node after {rm} reward-model nodes (grpo.py setup)")
    elif not colocated and policy_nodes == 1:  # one node trains and generates
        if not isinstance(gen_gpus, int) or gen_gpus < 1:
            problems.append(f"{res}.gpus_per_node must be set > 0 when one node trains and generates (grpo.py setup)")
        elif gpus - gen_gpus < 1:
            problems.append(f"{res}.gpus_per_node={gen_gpus} leaves no training GPU of cluster.gpus_per_node={gpus} "
                            "(grpo.py setup)")
        if gen_nodes not in (None, 1):
            problems.append(f"{res}.num_nodes must be 1 or null when one node trains and generates, got {gen_nodes} "
                            "(grpo.py setup)")
    elif not colocated:
        if not isinstance(gen_nodes, int) or gen_nodes < 1:
            problems.append(f"{res}.num_nodes must be > 0 with non-colocated generation on {policy_nodes} policy nodes "
                            "(grpo.py setup)")
        elif policy_nodes - gen_nodes < 1:
            problems.append(f"cluster.num_nodes={total} - {res}.num_nodes={gen_nodes} leaves {policy_nodes - gen_nodes} "
                            "training nodes; NeMo-RL needs > 0 (judge/GenRM and fleet nodes come on top of "
                            "cluster.num_nodes, not out of it)")
        if gen_gpus != gpus:
            problems.append(f"{res}.gpus_per_node={gen_gpus} must equal cluster.gpus_per_node={gpus} when generation "
                            "has nodes of its own (grpo.py setup)")
    elif get_path(cfg, "grpo.async_grpo.enabled") and get_path(cfg, "policy.generation.backend", "vllm") != "megatron":
        problems.append("async GRPO with vLLM needs non-colocated generation: set policy.generation.colocated.enabled=false "
                        "(grpo.py async_grpo_train: 'Colocated async GRPO is only supported for the Megatron generation "
                        "backend')")
    if problems:
        return problems
    roles = node_roles(cfg)
    return _training_checks(cfg, roles.training_gpus) + _generation_checks(cfg, roles) + _gym_runner_checks(cfg)


def _parallel(cfg: dict[str, Any]) -> tuple[str, int, int, int, int, int]:
    megatron = bool(get_path(cfg, "policy.megatron_cfg.enabled"))
    if megatron:
        m = "policy.megatron_cfg"
        return (m, _int(get_path(cfg, f"{m}.tensor_model_parallel_size"), 1), _int(get_path(cfg, f"{m}.context_parallel_size"), 1),
                _int(get_path(cfg, f"{m}.pipeline_model_parallel_size"), 1), _int(get_path(cfg, f"{m}.expert_model_parallel_size"), 1),
                _int(get_path(cfg, f"{m}.expert_tensor_parallel_size"), 1) or 1)
    d = "policy.dtensor_cfg"
    return d, _int(get_path(cfg, f"{d}.tensor_parallel_size"), 1), _int(get_path(cfg, f"{d}.context_parallel_size"), 1), 1, 1, 1


def _training_checks(cfg: dict[str, Any], world: int) -> list[str]:
    problems = []
    where, tp, cp, pp, ep, etp = _parallel(cfg)
    model_parallel = tp * cp * pp
    if world < 1:
        return problems
    if world % model_parallel:
        problems.append(f"training world size {world} GPUs is not divisible by PP {pp} x CP {cp} x TP {tp} = {model_parallel} "
                        f"({where}; lm_policy.py raises ValueError at policy init)")
        return problems
    dp = world // model_parallel
    prompts = _int(get_path(cfg, "grpo.num_prompts_per_step"))
    gens = _int(get_path(cfg, "grpo.num_generations_per_prompt"))
    gbs = _int(get_path(cfg, "policy.train_global_batch_size"))
    if gbs and gbs % dp:
        problems.append(f"policy.train_global_batch_size={gbs} is not divisible by data parallel {dp} = {world} GPUs / "
                        f"(PP {pp} x CP {cp} x TP {tp}) (batched_data_dict.py shard_by_batch_size asserts at the first step)")
    if gbs and prompts * gens and (prompts * gens) % gbs:
        problems.append(f"grpo.num_prompts_per_step x num_generations_per_prompt = {prompts * gens} samples are not a "
                        f"whole number of policy.train_global_batch_size={gbs} batches (shard_by_batch_size)")
    if get_path(cfg, "loss_fn.force_on_policy_ratio") and gbs != prompts * gens:
        problems.append(f"loss_fn.force_on_policy_ratio needs policy.train_global_batch_size ({gbs}) == "
                        f"num_prompts_per_step x num_generations_per_prompt ({prompts * gens}) (grpo.py setup)")
    if tp >= 4 and not get_path(cfg, "loss_fn.force_on_policy_ratio") and \
            get_path(cfg, "policy.train_micro_batch_size") != get_path(cfg, "policy.logprob_batch_size"):
        problems.append("TP >= 4 needs policy.train_micro_batch_size == policy.logprob_batch_size (lm_policy.py's "
                        "batch-variant accuracy check), or loss_fn.force_on_policy_ratio=true")
    if ep * etp > 1 and (world // pp) % (ep * etp):
        problems.append(f"training world size {world} / PP {pp} is not divisible by EP {ep} x ETP {etp} "
                        "(Megatron-Core's expert-parallel groups)")
    return problems


def _generation_checks(cfg: dict[str, Any], roles: NodeRoles) -> list[str]:
    if get_path(cfg, "policy.generation.backend", "vllm") != "vllm":
        return []
    v = "policy.generation.vllm_cfg"
    per_instance = _int(get_path(cfg, f"{v}.tensor_parallel_size"), 1) * _int(get_path(cfg, f"{v}.pipeline_parallel_size"), 1)
    if roles.generation:
        world = roles.generation * roles.gpus_per_node
    elif not bool(get_path(cfg, "policy.generation.colocated.enabled", True)):
        world = roles.gpus_per_node - roles.training_gpus
    else:
        world = roles.training_gpus
    if world > 0 and world % per_instance:
        return [f"generation GPUs {world} are not a whole number of vLLM instances of TP x PP = {per_instance} ({v})"]
    return []


def _gym_runner_checks(cfg: dict[str, Any]) -> list[str]:
    problems = []
    if get_path(cfg, "grpo.max_val_samples") is not None:
        problems.append("grpo.max_val_samples must be null: NeMo-RL's Gym runner validates on the whole validation file "
                        "(run_grpo_nemo_gym.py raises ValueError)")
    if get_path(cfg, "grpo.async_grpo.enabled"):
        for key in ("grpo.use_dynamic_sampling", "grpo.reward_scaling.enabled", "grpo.reward_shaping.enabled",
                    "data.use_multiple_dataloader"):
            if get_path(cfg, key):
                problems.append(f"{key} must be false with async GRPO (run_grpo_nemo_gym.py raises NotImplementedError)")
    return problems
