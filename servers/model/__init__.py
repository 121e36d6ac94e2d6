"""The local OpenAI-compatible model server (``envs model serve``), the repo's one decode engine,
and the ``tiny`` model preset.

``tiny`` (the preset shared with the trainer), ``loading`` (what can be served), ``sampling``
(per-sequence parameters, the device sampler), ``decoder`` (static-KV-cache forward), ``step_graph``
(captured decode steps), ``engine`` (one batch from prompt ids to tokens, logprobs and versions),
``scheduler`` (requests -> batches, pause/resume), ``completions`` / ``openai_api`` (request and
response shapes), ``weight_transfer`` and ``rl_routes`` (vLLM's RL control surface), ``server``
(aiohttp routes), ``vllm_engine`` (``vllm serve`` where vLLM and a GPU are present), ``cli``.
"""
