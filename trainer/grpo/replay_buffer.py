"""The collector's bookkeeping: prompt order, admission control, the buffer of finished groups.

Admission control (AReaL `StalenessManager`, SkyRL; trainer-peers.md §2.2, §8.1) instead of
generate-then-discard: every admitted prompt group gets the next *slot*; slot i is trained at
step ``i // num_prompts_per_step`` (FIFO). A generator whose weights are at version g may only
take slot i if ``i // B - g <= max_trajectory_age_steps``, so the lag a group will have at training
time is bounded when it is admitted. max age 0 is the synchronous schedule: batch s is generated
only by weights of version s.

Groups that slip through anyway (a generator slow to load new weights, a resume) are dropped at
``take`` time, counted, and their prompt goes back to the head of the queue: nothing is lost.

Checkpoint state is the consumed prompt ids plus the prompts in flight (admitted, not trained), in
slot order; on restore they are re-admitted first, so the trained sequence of prompts is the same as
an uninterrupted run's (NeMo-RL #3599 lost ~30% of prompts across resumes by saving a cursor).
"""

from __future__ import annotations

import random
import threading
from typing import Any

from trainer.rollout.sample import Group, Ticket


class ReplayBuffer:
    def __init__(self, prompt_ids: list[str], num_prompts_per_step: int, max_age: int, max_num_steps: int,
                 seed: int = 0, shuffle: bool = True, max_num_epochs: int = 100):
        self.prompt_ids = list(prompt_ids)
        self.B, self.max_age, self.max_num_steps = num_prompts_per_step, max_age, max_num_steps
        self.seed, self.shuffle, self.max_num_epochs = seed, shuffle, max_num_epochs
        self._lock = threading.Lock()
        self.epoch, self.cursor = 0, 0
        self._order = self._epoch_order(0)
        self.next_slot = 0
        self.free_slots: list[int] = []          # slots freed by dropped groups, refilled first
        self.requeue: list[int] = []             # prompt indices to admit before new ones
        self.admitted: dict[int, Ticket] = {}    # slot -> ticket, not yet trained
        self.done: dict[int, Group] = {}         # slot -> finished group
        self.consumed: list[str] = []            # prompt ids in the order they were trained
        self.dropped = 0

    def trained_version(self) -> int:
        """Batches handed out for training: the weight version once they are trained (trainer.grpo.versions)."""
        return len(self.consumed) // self.B

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.prompt_ids)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def _next_prompt(self) -> int | None:
        if self.requeue:
            return self.requeue.pop(0)
        if self.cursor >= len(self._order):
            if self.epoch + 1 >= self.max_num_epochs or not self._order:
                return None
            self.epoch, self.cursor = self.epoch + 1, 0
            self._order = self._epoch_order(self.epoch)
        idx = self._order[self.cursor]
        self.cursor += 1
        return idx

    # ---- generator side ---------------------------------------------------------------
    def admit(self, generator_version: int, max_groups: int) -> list[Ticket]:
        """Up to ``max_groups`` tickets whose training step stays within the lag bound."""
        out: list[Ticket] = []
        with self._lock:
            while len(out) < max_groups:
                slot = self.free_slots[0] if self.free_slots else self.next_slot
                step = slot // self.B
                if step >= self.max_num_steps or step - generator_version > self.max_age:
                    break
                idx = self._next_prompt()
                if idx is None:
                    break
                if self.free_slots:
                    self.free_slots.pop(0)
                else:
                    self.next_slot += 1
                t = Ticket(slot=slot, prompt_index=idx, seed=self.seed * 7_919 + slot)
                self.admitted[slot] = t
                out.append(t)
        return out

    def put(self, groups: list[Group]) -> None:
        with self._lock:
            for g in groups:
                if g.ticket.slot in self.admitted:
                    self.done[g.ticket.slot] = g

    # ---- trainer side -----------------------------------------------------------------
    def ready(self, step: int) -> bool:
        """Whether the full batch for ``step`` is here (no partial batches). Groups older than the
        bound are dropped and re-queued (safety net behind admission). The driver asks this, then
        hands ``take(step)``'s reference to the trainer: the batch never passes through the driver."""
        with self._lock:
            return self._complete(step)

    def take(self, step: int) -> list[Group] | None:
        """The full batch for ``step``, or None while it is incomplete (see :meth:`ready`)."""
        with self._lock:
            if not self._complete(step):
                return None
            slots = range(step * self.B, (step + 1) * self.B)
            batch = [self.done.pop(s) for s in slots]
            for s in slots:
                del self.admitted[s]
            self.consumed.extend(g.task_id for g in batch)
            return batch

    def _complete(self, step: int) -> bool:
        if step != self.trained_version():
            from trainer.grpo.versions import WeightVersionMismatch

            raise WeightVersionMismatch(f"the driver asks for the batch of step {step}, but the buffer has handed out "
                                        f"{self.trained_version()} batches")
        slots = range(step * self.B, (step + 1) * self.B)
        for s in slots:
            g = self.done.get(s)
            if g is not None and step - g.start_version > self.max_age:
                self.dropped += 1
                del self.done[s]
                t = self.admitted.pop(s)
                self.requeue.insert(0, t.prompt_index)
                self.free_slots.append(s)
                self.free_slots.sort()
        return all(s in self.done for s in slots)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"buffer_size": len(self.done), "in_flight_groups": len(self.admitted) - len(self.done),
                    "dropped_stale_groups": self.dropped, "epoch": self.epoch, "trained_version": self.trained_version()}

    # ---- checkpoint -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            in_flight = [self.admitted[s].prompt_index for s in sorted(self.admitted)]
            return {"epoch": self.epoch, "cursor": self.cursor, "consumed": list(self.consumed),
                    "in_flight_prompts": in_flight + [i for i in self.requeue if i not in in_flight],
                    "dropped": self.dropped, "consumed_slots": len(self.consumed)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore at a step boundary: every admitted-but-untrained prompt is re-admitted first,
        in its original slot order, under the resumed weights."""
        with self._lock:
            self.epoch, self.cursor = state["epoch"], state["cursor"]
            self._order = self._epoch_order(self.epoch)
            self.consumed = list(state["consumed"])
            self.requeue = list(state["in_flight_prompts"])
            self.dropped = state.get("dropped", 0)
            self.next_slot = state["consumed_slots"]
            self.free_slots, self.admitted, self.done = [], {}, {}
