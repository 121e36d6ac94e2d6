"""The local OpenAI-compatible model server (``envs model serve``) and the ``tiny`` model preset.

``tiny`` (the preset shared with the trainer), ``loading`` (what can be served), ``batching``
(concurrent requests -> one generate), ``openai_api`` (request/response shapes), ``server``
(aiohttp routes), ``vllm_engine`` (``vllm serve`` where vLLM and a GPU are present), ``cli``.
"""
