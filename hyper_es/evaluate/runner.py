"""Evaluate a task: prompts → generator → decode → reward → Pass@k."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import asdict, dataclass, field

from hyper_es import rewards
from hyper_es.engine.base import Generator
from hyper_es.environments import play, summary
from hyper_es.environments.episodes import opening
from hyper_es.sampling import Sampling
from hyper_es.errors import ConfigError
from hyper_es.evaluate.passk import mean_pass_at_k
from hyper_es.tasks import Task
from hyper_es.tasks.scoring import reward_errors, score_completions

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
    reward_errors: int = 0  # reward calls that raised and scored 0
    records: list[dict] = field(default_factory=list, repr=False)

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("records")
        return d


def problem_seed(seed: int, task: str, row_id: str) -> int:
    """The sampling seed of one problem: from the evaluation seed, the task and the row id, so every model scored
    with the same seed sees the same random numbers on a problem (common random numbers for paired Pass@k)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{task}:{row_id}".encode()).digest()[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class EvalJob:
    """One task's share of an engine call: its split, decoding, the k of Pass@k and how many rows."""
    task: Task
    split: str = "test"
    sampling: Sampling | None = None
    ks: tuple[int, ...] = (1,)
    limit: int | None = None

    def decoding(self) -> Sampling:
        """The job's sampling (the task's greedy default), with enough samples for its largest k."""
        sampling = self.sampling or self.task.sampling()
        if max(self.ks) > sampling.n:
            raise ConfigError(f"pass@{max(self.ks)} needs n >= {max(self.ks)} samples per problem, got n={sampling.n}")
        return sampling


def evaluate_task(gen: Generator, tokenizer, task: Task, *, split: str = "test", sampling: Sampling | None = None,
                  ks: tuple[int, ...] = (1,), limit: int | None = None) -> TaskResult:
    """Score `n` completions per problem; a completion counts as correct when its reward is 1."""
    return evaluate_tasks(gen, tokenizer, [EvalJob(task, split, sampling, ks, limit)])[0]


def evaluate_tasks(gen: Generator, tokenizer, jobs: list[EvalJob]) -> list[TaskResult]:
    """Every job in one engine call (the engine batches them all; HF runs one `generate` per job), each scored as
    `evaluate_task` scores it. A result's `seconds` is its share of the call by generated tokens, plus its scoring.
    A task with an environment is played instead (`_played`), after the others."""
    single = [job for job in jobs if job.task.environment is None]
    done = dict(zip(map(id, single), _generated(gen, tokenizer, single) if single else []))
    return [done[id(job)] if id(job) in done else _played(gen, tokenizer, job) for job in jobs]


def _played(gen, tokenizer, job: EvalJob) -> TaskResult:
    """An environment task's episodes (environments/episodes.py), `sampling.n` per row: a sample is correct when its
    episode's reward is >= 1. Records keep each episode's counts and its messages after the prompt."""
    t0, task, sampling = time.perf_counter(), job.task, job.decoding()
    rows = task.episode_rows(task.rows(job.split)[: job.limit] if job.limit else task.rows(job.split))
    episodes = play(lambda asks: [gen.generate_groups(asks[0])], tokenizer, task.environment, [rows], task.limits(),
                    sampling=sampling, max_len=getattr(gen, "max_model_len", None), schemas=[task.tool_schemas()])[0]
    records, counts, scored, n = [], [], [], sampling.n
    for i, row in enumerate(rows):
        mine = episodes[i * n:(i + 1) * n]
        scores = [e.reward for e in mine]
        counts.append((n, sum(v >= 1.0 for v in scores)))
        scored += scores
        records.append({"id": row["id"], "reference": None, "scores": scores,
                        "episodes": [{**e.record(), "messages": e.messages[len(opening(row)):]} for e in mine]})
    result = TaskResult(task=task.name, split=job.split, backend=gen.backend, problems=len(rows), n=n,
                        temperature=sampling.temperature, max_tokens=task.limits().max_tokens,
                        pass_at={k: mean_pass_at_k(counts, k) for k in job.ks}, mean_reward=sum(scored) / len(scored),
                        tokens=sum(e.tokens for e in episodes), seconds=time.perf_counter() - t0, records=records)
    logger.info("%s/%s: %s over %d episodes (%s), %d tokens in %.1f s", task.name, job.split,
                ", ".join(f"pass@{k}={v:.3f}" for k, v in result.pass_at.items()), len(episodes),
                summary(episodes)["ends"], result.tokens, result.seconds)
    return result


def _generated(gen: Generator, tokenizer, jobs: list[EvalJob]) -> list[TaskResult]:
    asks, t0 = [], time.perf_counter()
    for job in jobs:
        sampling = job.decoding()
        rows = job.task.rows(job.split)[: job.limit] if job.limit else job.task.rows(job.split)
        prompts = job.task.prompt_ids(tokenizer, rows, max_len=getattr(gen, "max_model_len", None),
                                      max_tokens=sampling.max_tokens)
        seeds = [problem_seed(sampling.seed, job.task.name, r["id"]) for r in rows]  # greedy: unused
        asks.append((rows, prompts, sampling, seeds))
    outputs = gen.generate_groups([(p, s) for _, p, s, _ in asks], [seeds for *_, seeds in asks])
    called = time.perf_counter() - t0
    generated = [sum(len(c) for outs in group for c in outs) for group in outputs]
    return [_scored(gen, tokenizer, job, ask, outs, called * (n / max(1, sum(generated))))
            for job, ask, outs, n in zip(jobs, asks, outputs, generated, strict=True)]


def _scored(gen, tokenizer, job: EvalJob, ask, outputs, share: float) -> TaskResult:
    (rows, _, sampling, _), task, t0, failed = ask, job.task, time.perf_counter(), rewards.failures()
    records, counts, scored, tokens = [], [], [], 0
    for row, outs in zip(rows, outputs, strict=True):
        texts, scores = score_completions(tokenizer, task, row, outs, sampling.stop)
        tokens += sum(map(len, outs))
        counts.append((len(scores), sum(s >= 1.0 for s in scores)))
        scored.extend(scores)
        records.append({"id": row["id"], "reference": task.reference(row), "completions": texts, "scores": scores})
    seconds = share + time.perf_counter() - t0
    result = TaskResult(
        task=task.name, split=job.split, backend=gen.backend, problems=len(rows), n=sampling.n,
        temperature=sampling.temperature, max_tokens=sampling.max_tokens,
        pass_at={k: mean_pass_at_k(counts, k) for k in job.ks}, mean_reward=sum(scored) / len(scored),
        tokens=tokens, seconds=seconds, reward_errors=reward_errors(failed), records=records,
    )
    if result.reward_errors:
        logger.warning("%s/%s: the reward raised on %d completions (scored 0)", task.name, job.split,
                       result.reward_errors)
    logger.info("%s/%s: %s, %d tokens in %.1f s", task.name, job.split,
                ", ".join(f"pass@{k}={v:.3f}" for k, v in result.pass_at.items()), tokens, seconds)
    return result
