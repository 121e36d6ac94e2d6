"""Measure a policy's tool hallucination rate in process: generate on tool rows, classify.

No environment server is involved: the classification (trainer.tool_use) needs only the row's
own tool schemas, so DPO validation and the benchmark measure the rate without scoring. Each
response is parsed exactly as a rollout parses it (trainer.responses, Hermes ``<tool_call>``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from trainer.rollout.decode import decode_batch
from trainer.rollout.generator import SamplingParams
from trainer.responses import build_response, chat_tools, to_chat_messages, turn_items
from trainer.tool_use import classify_tool_use, kind_rates, row_tools


def generate_tool_responses(policy: Any, rows: list[dict[str, Any]], *, num_generations: int, params: SamplingParams,
                            seed: int, max_total_sequence_length: int | None = None,
                            batch_size: int = 64) -> list[tuple[int, dict[str, Any]]]:
    """(row index, Responses-API response) for ``num_generations`` samples of each row whose prompt
    leaves room for at least one new token."""
    jobs = []
    for i, row in enumerate(rows):
        create = row.get("responses_create_params") or {}
        ids = policy.encode(policy.render(to_chat_messages(create), chat_tools(create.get("tools"))))
        room = params.max_new_tokens if max_total_sequence_length is None else \
            min(params.max_new_tokens, max_total_sequence_length - len(ids))
        if room > 0:
            jobs += [(i, ids, SamplingParams(params.temperature, params.top_p, room, params.stop))] * num_generations
    rng = torch.Generator().manual_seed(seed)
    out = []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start:start + batch_size]
        gens = decode_batch(policy, [j[1] for j in chunk], [j[2] for j in chunk], rng=rng)
        for (i, ids, _), g in zip(chunk, gens):
            items = turn_items(g.text, prompt_ids=ids, gen_ids=g.token_ids, logprobs=g.logprobs, versions=g.versions,
                               parse_tools=True)
            out.append((i, build_response(items, create_params=rows[i].get("responses_create_params") or {},
                                          model=policy.name, input_tokens=len(ids), output_tokens=len(g.token_ids),
                                          incomplete=g.truncated)))
    return out


def hallucination_rate(policy: Any, rows: list[dict[str, Any]], *, num_generations: int, params: SamplingParams,
                       seed: int, max_total_sequence_length: int | None = None) -> dict[str, Any]:
    """``{responses, hallucination_rate, <kind>_rate..., counts}`` over sampled responses (rows
    without tools are skipped); ``skipped_rows`` counts prompts over the length limit."""
    tool_rows = [r for r in rows if row_tools(r)]
    responses = generate_tool_responses(policy, tool_rows, num_generations=num_generations, params=params, seed=seed,
                                        max_total_sequence_length=max_total_sequence_length)
    counts: Counter[str] = Counter(classify_tool_use(resp, row_tools(tool_rows[i])).kind for i, resp in responses)
    done_rows = {i for i, _ in responses}
    return {**kind_rates(counts), "skipped_rows": len(tool_rows) - len(done_rows)}
