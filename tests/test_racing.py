"""Racing a generation over rungs of the fitness rows (hyper_es/search/racing.py): with every candidate promoted it
is full scoring; on a toy noisy fitness it reaches the same optimum as full scoring with fewer evaluations."""

import numpy as np
import pytest

from hyper_es.search.racing import bound, in_doubt, race


def _rows(n_rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=n_rows)  # a row's difficulty, shared by every candidate


def _toy(xs: list[np.ndarray], rows: np.ndarray, target: np.ndarray):
    """Reward 1 on a row when the candidate's quality 1 - |x - target| / 2 beats the row's difficulty: a noisy,
    binary fitness whose mean over rows is the quality, on rows every candidate shares (as the fitness set is)."""
    quality = np.array([max(0.0, 1 - np.linalg.norm(x - target) / 2) for x in xs])

    def score(candidates, lo, hi):
        return (quality[candidates, None] > rows[None, lo:hi]).astype(float)
    return score


def test_every_candidate_promoted_is_full_scoring():
    rng = np.random.default_rng(1)
    xs, rows = [rng.normal(size=3) for _ in range(8)], _rows(64)
    score = _toy(xs, rows, np.zeros(3))
    full = score(list(range(8)), 0, 64).mean(axis=1)
    raced = race(score, 8, [8, 16, 32, 64], parents=4, delta=0)  # no interval settles anything
    assert raced.fitness == pytest.approx(full.tolist(), abs=0) and raced.rows == [64] * 8
    assert raced.evaluations == 8 * 64 and raced.tiers == [0] * 8 and raced.told == raced.fitness


def test_the_ranking_told_puts_settled_in_above_raced_above_settled_out():
    """Tier first, then the mean on the rows the tier shares: after the first rung one candidate is settled in, two
    are settled out, and the two in doubt race on; the told order follows."""
    def rows(ones: list[range]) -> np.ndarray:
        r = np.zeros(64)
        for span in ones:
            r[span] = 1
        return r

    per = {0: np.ones(64), 1: rows([range(0, 16), range(32, 60)]), 2: rows([range(8, 24), range(32, 36)]),
           3: np.zeros(64), 4: np.zeros(64)}

    def score(candidates, lo, hi):
        return np.array([per[c][lo:hi] for c in candidates])

    raced = race(score, 5, [32, 64], parents=2, delta=0.05)
    assert raced.tiers == [1, 0, 0, -1, -1] and raced.rows == [32, 64, 64, 32, 32]
    assert raced.evaluations == 5 * 32 + 2 * 32
    assert sorted(range(5), key=lambda c: -raced.told[c])[:3] == [0, 1, 2]
    assert raced.fitness[1] == pytest.approx(44 / 64) and raced.fitness[2] == pytest.approx(20 / 64)
    assert raced.told[3] == raced.told[4] < min(raced.told[:3])


def test_a_candidate_is_settled_only_when_its_paired_differences_say_so():
    hard = np.array([1.0] * 40 + [0.0] * 24)  # the rows one candidate solves, nested in each other's (a shared row set)
    easy, mid, low = np.ones(64), np.array([1.0] * 50 + [0.0] * 14), np.array([1.0] * 10 + [0.0] * 54)
    assert in_doubt({0: easy, 1: mid, 2: hard, 3: low}, places=2, delta=0.05) == ([1, 2], [0])  # 0 in, 3 out
    assert in_doubt({0: easy, 1: mid, 2: hard, 3: low}, places=2, delta=0) == ([0, 1, 2, 3], [])  # none settles
    hoeffding = 2 * np.sqrt(np.log(40) / 2000)
    assert bound(easy - hard, 0.05) == pytest.approx(2 * np.sqrt(np.log(40) / 128))  # few rows: Hoeffding's
    assert bound(np.full(1000, 0.1), 0.05) < hoeffding / 2  # many rows that agree: Bernstein's, far tighter


def _search(racing: bool, seed: int) -> tuple[float, int]:
    """CMA-ES (pycma, as the search uses it) on the toy fitness: (final distance to the target, evaluations)."""
    import cma

    target, rows = np.full(4, 0.7), _rows(256, seed)  # x0 = 0: 1.4 from the target
    es = cma.CMAEvolutionStrategy(np.zeros(4).tolist(), 0.5, {"seed": seed + 1, "verbose": -9, "popsize": 12,
                                                               "tolfun": 0, "tolflatfitness": float("inf")})
    evaluations = 0
    for _ in range(40):
        xs = [np.asarray(x) for x in es.ask()]
        score = _toy(xs, rows, target)
        if racing:
            r = race(score, len(xs), [32, 64, 128, 256], parents=es.sp.weights.mu, delta=0.1)
            fitness, evaluations = r.told, evaluations + r.evaluations  # the ranking, as the search tells it
        else:
            fitness, evaluations = score(list(range(len(xs))), 0, 256).mean(axis=1), evaluations + len(xs) * 256
        es.tell([x.tolist() for x in xs], [-f for f in fitness])  # pycma minimises
    return float(np.linalg.norm(es.mean - target)), evaluations


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_racing_reaches_the_optimum_of_full_scoring_with_fewer_evaluations(seed):
    full_distance, full_evals = _search(False, seed)
    raced_distance, raced_evals = _search(True, seed)
    assert full_distance < 0.05 and raced_distance < 0.05, (full_distance, raced_distance)
    # fewer, not many fewer: 3.5-4.2% on seeds 0-2. On 32 to 256 binary rows a pair's bound is 0.43 to 0.13 (delta
    # 0.1), and a generation's candidates differ by less except early on, so most of them race to the last rung.
    assert raced_evals < full_evals, (raced_evals, full_evals)


class _Rows:
    """A scorer at the unit level: a candidate (its quality, a number) solves a row when it beats the row's
    difficulty; one token per row scored. The per-row order is the scorer's (task by task), as the Scorer's."""

    def __init__(self):
        self.calls = []

    def score_many(self, xs, rows, **kw):
        from hyper_es.fitness import Score

        self.calls.append((len(xs), sum(map(len, rows.values()))))
        out = []
        for q in xs:
            per = [float(q > r["difficulty"]) for name in rows for r in rows[name]]
            by_task = [np.mean([float(q > r["difficulty"]) for r in rows[name]]) for name in rows]
            w = [2.0 if name == "a" else 1.0 for name in rows]
            out.append(Score(float(np.dot(w, by_task) / sum(w)), len(per), {"generate_s": 0.1}, per_row=per))
        return out


def _pool(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {name: [{"id": f"{name}{i}", "difficulty": float(d)} for i, d in enumerate(rng.uniform(size=n))]
            for name in ("a", "b")}


def _fitness(**race):
    from hyper_es.recipe import FitnessConfig

    return FitnessConfig(minibatch=32, fitness_set="fixed", **({"race": race} if race else {}))


def test_a_raced_generation_with_nothing_settled_is_full_scoring_task_weighted():
    """fitness.race with delta 0: every candidate scored on every row, in rungs, and each one's fitness the
    task-weighted mean full scoring gives (task a weighs 2); the tokens are the rows scored."""
    from hyper_es.search.loop import raced_scores, generation_scores

    pool, xs = _pool(40), [0.2, 0.5, 0.55, 0.9]
    full = generation_scores(_Rows(), pool, _fitness(), xs, 0)
    scorer = _Rows()
    scores, raced = raced_scores(scorer, pool, _fitness(rungs=[8, 24], delta=0), xs, 0, 2, {"a": 2.0, "b": 1.0})
    assert [sc.reward for sc in scores] == pytest.approx([sc.reward for sc in full], abs=1e-12)
    assert raced["told"] == pytest.approx([sc.reward for sc in full], abs=1e-12)
    assert raced["race"]["rungs"] == [8, 24, 64] and raced["race"]["evaluations"] == 4 * 64 == raced["race"]["full"]
    assert scorer.calls == [(4, 8), (4, 16), (4, 40)] and [sc.tokens for sc in scores] == [64] * 4


def test_a_raced_generation_settles_clear_candidates_early_and_tells_their_ranking():
    from hyper_es.search.loop import raced_scores

    pool, xs = _pool(40, seed=1), [0.02, 0.97, 0.5, 0.52, 0.03, 0.98]
    scores, raced = raced_scores(_Rows(), pool, _fitness(rungs=[16, 32], delta=0.2), xs, 0, 3, {"a": 1.0, "b": 1.0})
    r = raced["race"]
    assert r["evaluations"] < r["full"] and sum(sc.tokens for sc in scores) == r["evaluations"]
    assert r["tiers"][0] == r["tiers"][4] == "out" and r["tiers"][1] == r["tiers"][5] == "in"
    order = sorted(range(6), key=lambda c: -raced["told"][c])
    assert set(order[:2]) == {1, 5} and set(order[4:]) == {0, 4}
    assert all(len(sc.per_row) == n for sc, n in zip(scores, r["rows"]))


def test_a_logged_search_replays_its_races_offline():
    """bench/race_replay.py: per-row rewards logged in task-then-row order are interleaved as the search races
    them, and a replay with nothing settled is full scoring with the same parents."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from race_replay import interleaved, replay

    assert interleaved([1, 2, 3, 10, 20], [3, 2]).tolist() == [1, 10, 2, 20, 3]
    rng = np.random.default_rng(0)
    quality = np.linspace(0.1, 0.9, 8)
    records = [{"per_row": [(rng.uniform(size=64) < q).astype(float).tolist() for q in quality]} for _ in range(3)]
    none = replay(records, [32, 32], [16, 32], 0.0, 4)
    assert none == {"delta": 0.0, "generations": 3, "evaluations": 3 * 8 * 64, "full": 3 * 8 * 64, "saved": 0.0,
                    "parents_changed": 0}
    loose = replay(records, [32, 32], [16, 32], 0.3, 4)
    assert loose["evaluations"] < loose["full"] and 0 < loose["saved"] < 1
