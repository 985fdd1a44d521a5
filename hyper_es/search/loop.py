"""The one generation loop, for every strategy: ask → score → tell → engine update → log and checkpoint.

A strategy (pycma's and evosax's surface) has `generation` (generations told), `ask()` (candidates: coefficient
vectors, ES members, …), `tell(candidates, fitness, **extra) -> record` (checkpoints, and returns the generation's
log record), `done()`, `records()` (the told generations, replayed from disk on resume) and
`engine_update(record)` (what a told generation asks of the engine: an ES step, or None). CMA-ES over
coefficients (search/driver.py) and OpenAI-style ES over seeds (search/es_strategy.py) are two strategies; a
third (co-evolution) fits without touching this loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Strategy(Protocol):
    generation: int

    def ask(self) -> list: ...

    def tell(self, candidates: list, fitness: list[float], **extra) -> dict: ...

    def done(self) -> bool: ...

    def records(self) -> list[dict]: ...

    def engine_update(self, record: dict) -> tuple | None: ...


Evaluate = Callable[[list, int], tuple[list[float], dict]]


def drive(strategy: Strategy, evaluate: Evaluate, *, update: Callable | None = None,
          on_record: Callable[[dict], None] | None = None) -> Strategy:
    """Run `strategy` until done. `evaluate(candidates, generation) -> (fitness, extra record fields)`;
    `update(*args)` applies a generation's engine update (first those of the generations replayed from disk)."""
    if update is not None:
        for record in strategy.records():
            args = strategy.engine_update(record)
            if args is not None:
                update(*args)
    while not strategy.done():
        generation = strategy.generation
        candidates = strategy.ask()
        fitness, extra = evaluate(candidates, generation)
        record = strategy.tell(candidates, fitness, **extra)
        args = strategy.engine_update(record)
        if args is not None and update is not None:
            update(*args)
        if on_record is not None:
            on_record(record)
    return strategy


def generation_scores(scorer, pool: dict, s, candidates: list, generation: int, *, reward=None,
                      answers: bool = False, on_done=None, split=None) -> list:
    """The candidates' Scores on generation `generation`'s fitness minibatch (fitness.fitness_set, minibatch,
    samples, temperature, seed + generation; `reward` replaces the tasks' own). `split(candidates)`: (genomes,
    each one's tasks as prompted), for candidates that carry a prompt (co-evolution)."""
    from hyper_es.fitness import fitness_rows

    kw = {"answers": True} if answers else {}
    if split is not None:
        candidates, kw["tasks"] = split(candidates)
    return scorer.score_many(candidates, fitness_rows(pool, s, generation), samples=s.samples,
                             temperature=s.temperature, seed=s.seed + generation, reward=reward, on_done=on_done, **kw)


def score_generation(scorer, pool: dict, s, *, reward=None, answers: bool = False, on_candidate=None,
                     extra: Callable[[list, list], dict] | None = None, split=None) -> Evaluate:
    """`evaluate` for `drive`: every candidate's Score on the generation's fitness minibatch (fitness.fitness_set,
    minibatch, samples, temperature, seed + generation; `reward` replaces the tasks' own). The record gets the
    generation's tokens, `extra(candidates, scores)`'s fields, and an engine pool's per-actor counts."""

    def evaluate(candidates: list, generation: int) -> tuple[list[float], dict]:
        scores = generation_scores(scorer, pool, s, candidates, generation, reward=reward, answers=answers,
                                   on_done=on_candidate, split=split)
        fields = {"tokens": sum(sc.tokens for sc in scores), **(extra(candidates, scores) if extra else {})}
        if hasattr(scorer, "throughput"):  # an engine pool: per-actor counts
            fields["actors"] = scorer.throughput()
        return [sc.reward for sc in scores], fields

    return evaluate
