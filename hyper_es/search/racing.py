"""Racing a generation's candidates over rungs of the fitness rows (issue 44): every candidate is scored on the
first rung, and only those whose place among the strategy's parents is still in doubt go on to the next.

A CMA-ES generation needs the ranking of its best `parents` candidates (pycma's μ) right, not every candidate's
mean to the last row. After each rung, the candidates still racing share their rows, so each pair is compared by
its paired differences (common random numbers: a hard row is hard for both), with a bound at confidence 1 - `delta`
per pair (rewards in [0, `span`]). A candidate is settled in when it is ahead of every racing candidate outside the
parents' places left, settled out when every one inside them is ahead of it; the others go on to the next rung.
The last rung is the whole fitness set, so a generation never costs more than full scoring, and with every
candidate promoted (`delta` 0) it is full scoring exactly.

The strategy is told a ranking (CMA-ES uses nothing else): every candidate settled in above every candidate raced to
the last rung, every one settled out below; within a tier by the mean on the rows the tier's candidates all share
(its earliest rung). `Race.told` encodes that order as numbers; with nothing settled it is each candidate's mean on
every row, so full scoring is the special case. `fitness.race` wires it into `hyper-es search` (search/loop.py).

What it saves depends on how far apart a generation's candidates are against the bound: with binary rewards a pair
needs to differ by about 0.48 on 32 rows, 0.24 on 128 (delta 0.05), before either is settled. On a toy
(tests/test_racing.py, CMA-ES popsize 12, rungs 32/64/128/256, delta 0.1) it saved 3.5-4.2% of the evaluations and
reached the same optimum; a search whose candidates differ by 1-2 points (the re-decision's) would race nearly every
candidate to the last rung."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Score = Callable[[list[int], int, int], np.ndarray]  # (candidates, lo, hi) -> rewards [len(candidates), hi - lo]


Mean = Callable[[np.ndarray], float]  # a candidate's fitness on the first len(rewards) rows (task-weighted)
TIERS = {1: "in", 0: "raced", -1: "out"}


@dataclass(frozen=True)
class Race:
    fitness: list[float]  # each candidate's mean on the rows it was scored on
    rows: list[int]  # rows each candidate was scored on
    evaluations: int  # candidate-rows scored: the generation's cost in completions
    tiers: list[int]  # 1 settled in, 0 raced to the last rung (or never settled), -1 settled out
    told: list[float]  # the ranking told to the strategy: tier first, then the mean on the rows the tier shares


def interleaved(sizes: dict[str, int]) -> list[tuple[str, int]]:
    """The order racing scores a minibatch's rows in: (task, row index), the tasks round-robin, so every rung holds
    each task in proportion."""
    return [(name, i) for i in range(max(sizes.values(), default=0)) for name in sizes if i < sizes[name]]


def bound(diffs: np.ndarray, delta: float, span: float = 1.0) -> float:
    """A half-width for the mean of paired differences (each in [-span, span]) at confidence 1 - delta: the smaller
    of Hoeffding's and the empirical Bernstein bound (Maurer and Pontil), which shrinks with their variance: on rows
    every candidate shares, two candidates' rewards move together, so their differences vary far less than either."""
    n = len(diffs)
    if delta <= 0 or n < 2:
        return math.inf
    log, r = math.log(2 / delta), 2 * span
    hoeffding = r * math.sqrt(log / (2 * n))
    bernstein = math.sqrt(2 * float(np.var(diffs, ddof=1)) * log / n) + 7 * r * log / (3 * (n - 1))
    return min(hoeffding, bernstein)


def in_doubt(rewards: dict[int, np.ndarray], places: int, delta: float,
             span: float = 1.0) -> tuple[list[int], list[int]]:
    """(the racing candidates, their rewards on the same rows, whose side of the `places` best is not yet settled;
    those settled inside, best first). A candidate inside is settled when its paired difference with every candidate
    outside is above 0 with confidence, one outside when every candidate inside is above it."""
    order = sorted(rewards, key=lambda c: -rewards[c].mean())
    if places <= 0 or places >= len(order):
        return [], order[:max(places, 0)]
    inside, outside = order[:places], order[places:]

    def ahead(a: int, b: int) -> bool:
        d = rewards[a] - rewards[b]
        return d.mean() - bound(d, delta, span) > 0

    settled_in = [c for c in inside if all(ahead(c, o) for o in outside)]
    settled = set(settled_in) | {o for o in outside if all(ahead(c, o) for c in inside)}
    return [c for c in order if c not in settled], settled_in


def race(score: Score, n: int, rungs: Sequence[int], parents: int, *, delta: float = 0.05,
         span: float = 1.0, mean: Mean = np.mean) -> Race:
    """Score `n` candidates on the cumulative row counts `rungs` (the last: every fitness row), promoting only the
    candidates in doubt about the `parents` best places. `mean(rewards)`: a fitness on a prefix of the rows."""
    if not rungs or list(rungs) != sorted(set(rungs)) or rungs[0] <= 0:
        raise ValueError(f"rungs: expected increasing positive row counts, got {list(rungs)}")
    rewards = {c: np.zeros(0) for c in range(n)}
    tiers = dict.fromkeys(range(n), 0)
    racing, places, lo, evaluations = list(range(n)), parents, 0, 0
    for hi in rungs:
        block = np.asarray(score(racing, lo, hi), dtype=np.float64).reshape(len(racing), hi - lo)
        evaluations += block.size
        for c, row in zip(racing, block):
            rewards[c] = np.concatenate([rewards[c], row])
        lo = hi
        if hi == rungs[-1]:
            break
        before = racing
        racing, settled_in = in_doubt({c: rewards[c] for c in racing}, places, delta, span)
        for c in set(before) - set(racing):
            tiers[c] = 1 if c in settled_in else -1
        places -= len(settled_in)  # settled in: a parent's place taken
        if not racing:
            break
    rows = [len(rewards[c]) for c in range(n)]
    shared = {t: min((rows[c] for c in range(n) if tiers[c] == t), default=0) for t in TIERS}
    told = [tiers[c] * 2 * span + float(mean(rewards[c][:shared[tiers[c]]])) for c in range(n)]
    return Race([float(mean(rewards[c])) for c in range(n)], rows, evaluations, [tiers[c] for c in range(n)], told)
