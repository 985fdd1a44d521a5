"""Evaluate a task: prompts → generator → decode → reward → Pass@k."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

from hyper_es.engine.base import Generator, Sampling, truncate_at_stop
from hyper_es.evaluate.passk import mean_pass_at_k
from hyper_es.tasks import Task

logger = logging.getLogger(__name__)


@dataclass
class TaskResult:
    task: str
    split: str
    backend: str
    problems: int
    n: int
    temperature: float
    max_tokens: int
    pass_at: dict[int, float]
    mean_reward: float
    tokens: int
    seconds: float
    records: list[dict] = field(default_factory=list, repr=False)

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("records")
        return d


def score_completions(tokenizer, task: Task, row: dict, outs: list[list[int]],
                      stop: tuple[str, ...]) -> tuple[list[str], list[float]]:
    """Decode one problem's completions, cut them at the stop strings, and score them with the task's reward."""
    texts = [truncate_at_stop(tokenizer.decode(ids, skip_special_tokens=True), stop) for ids in outs]
    return texts, [task.score(t, row) for t in texts]


def evaluate_task(gen: Generator, tokenizer, task: Task, *, split: str = "test", sampling: Sampling | None = None,
                  ks: tuple[int, ...] = (1,), limit: int | None = None) -> TaskResult:
    """Score `n` completions per problem; a completion counts as correct when its reward is 1."""
    sampling = sampling or Sampling(max_tokens=task.cfg.max_tokens, stop=tuple(task.cfg.stop))
    if max(ks) > sampling.n:
        raise ValueError(f"pass@{max(ks)} needs n >= {max(ks)} samples per problem, got n={sampling.n}")
    rows = task.rows(split)[:limit] if limit else task.rows(split)
    t0 = time.perf_counter()
    outputs = gen.generate(task.prompt_ids(tokenizer, rows), sampling)
    records, counts, rewards, tokens = [], [], [], 0
    for row, outs in zip(rows, outputs, strict=True):
        texts, scores = score_completions(tokenizer, task, row, outs, sampling.stop)
        tokens += sum(map(len, outs))
        counts.append((len(scores), sum(s >= 1.0 for s in scores)))
        rewards.extend(scores)
        records.append({"id": row["id"], "reference": task.reference(row), "completions": texts, "scores": scores})
    seconds = time.perf_counter() - t0
    result = TaskResult(
        task=task.name, split=split, backend=gen.backend, problems=len(rows), n=sampling.n,
        temperature=sampling.temperature, max_tokens=sampling.max_tokens,
        pass_at={k: mean_pass_at_k(counts, k) for k in ks}, mean_reward=sum(rewards) / len(rewards),
        tokens=tokens, seconds=seconds, records=records,
    )
    logger.info("%s/%s: %s, %d tokens in %.1f s", task.name, split,
                ", ".join(f"pass@{k}={v:.3f}" for k, v in result.pass_at.items()), tokens, seconds)
    return result
