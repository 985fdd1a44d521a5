"""Decode and score one problem's completions: the rule the fitness layer and the evaluation share."""

from __future__ import annotations

from hyper_es import rewards
from hyper_es.sampling import truncate_at_stop


def reward_errors(before: dict[str, int]) -> int:
    """Reward calls that raised (and scored 0) since the `rewards.failures()` snapshot `before`."""
    return sum(rewards.failures().values()) - sum(before.values())


def score_completions(tokenizer, task, row: dict, outs: list[list[int]], stop: tuple[str, ...],
                      reward=None) -> tuple[list[str], list[float]]:
    """Decode one problem's completions, cut them at the stop strings, and score them with the task's reward (or
    `reward`, a callable, in its place)."""
    texts = [truncate_at_stop(tokenizer.decode(ids, skip_special_tokens=True), stop) for ids in outs]
    if reward is None:
        return texts, [task.score(t, row) for t in texts]
    return texts, [float(reward(t, task.reference(row))) for t in texts]
