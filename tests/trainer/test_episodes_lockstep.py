"""LockstepGenerator: the model turns of concurrent episodes decode together, in deterministic
batches (every live episode waiting, episode order, chunks of max_batch); an episode that ends
stops holding the others back; a decode error reaches every episode of its batch."""

from __future__ import annotations

import asyncio
import random

import pytest

from trainer.rollout.local_generator import LockstepGenerator


def _run(turns: list[int], max_batch: int, io_delay: bool = False, fail_on: int | None = None) -> list[list[tuple]]:
    """Episodes i take turns[i] model turns, with (random-length) "tool calls" between turns."""
    batches: list[list[tuple]] = []

    def decode(prompts, params):
        batches.append([(p[0], len(p)) for p in prompts])
        if fail_on is not None and any(p[0] == fail_on for p in prompts):
            raise RuntimeError("decode failed")
        return [f"gen{p[0]}.{len(p)}" for p in prompts]

    async def main():
        batcher = LockstepGenerator(policy=None, decode=decode, live=len(turns), max_batch=max_batch)
        rng = random.Random(0)

        async def episode(i: int) -> list[str]:
            out, prompt, turn = [], [i], batcher.for_episode(i)
            try:
                for _ in range(turns[i]):
                    if io_delay:
                        await asyncio.sleep(rng.random() / 200)  # a tool call of random length
                    out.append(await turn.generate(prompt, None))
                    prompt = prompt + [0]
            finally:
                batcher.finished()
            return out

        return await asyncio.gather(*(episode(i) for i in range(len(turns))), return_exceptions=True)

    results = asyncio.run(main())
    return batches, results


def test_all_one_turn_episodes_are_one_batch_in_episode_order():
    batches, results = _run([1] * 6, max_batch=64)
    assert batches == [[(i, 1) for i in range(6)]]
    assert results == [[f"gen{i}.1"] for i in range(6)]


@pytest.mark.parametrize("io_delay", [False, True])
def test_multi_turn_batches_are_the_same_whatever_the_tool_timing(io_delay):
    batches, results = _run([1, 3, 2, 3], max_batch=64, io_delay=io_delay)
    assert batches == [[(0, 1), (1, 1), (2, 1), (3, 1)], [(1, 2), (2, 2), (3, 2)], [(1, 3), (3, 3)]]
    assert results[1] == ["gen1.1", "gen1.2", "gen1.3"]


def test_max_batch_chunks_a_turn_in_episode_order():
    batches, _ = _run([1] * 5, max_batch=2)
    assert batches == [[(0, 1), (1, 1)], [(2, 1), (3, 1)], [(4, 1)]]


def test_a_decode_error_fails_the_episodes_of_its_batch_only():
    batches, results = _run([1] * 4, max_batch=2, fail_on=2)
    assert isinstance(results[2], RuntimeError) and isinstance(results[3], RuntimeError)
    assert results[0] == ["gen0.1"] and results[1] == ["gen1.1"]
