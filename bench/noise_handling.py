"""Racing against pycma's noise handler on a toy noisy fitness, at equal evaluations (issue 44: "racing, or pycma's
noise handler, if it measures better"). No engine: a candidate's reward on a row is a toy's.

    python bench/noise_handling.py [--seeds 10] [--out bench/results/noise_handling.json]

The toy, fixed before it ran: a genome of 12 coefficients (the composition genome's size), popsize 8, CMA-ES from 0
at sigma 0.5 towards 0.3 in every coordinate. A candidate's quality is q(x) = max(0, 1 - |x - t| / 2); it solves
row r when q(x) + e(x, r) > d(r), with d(r) ~ U(0, 1) the row's difficulty and e(x, r) ~ N(0, 0.3) drawn from (x, r)
alone, so a candidate scored twice on one row gets one reward (greedy decoding) and two candidates differ row by row
(the ranking noise of a real fitness). Each arm spends the budget of 40 generations scored on 128 rows, in
candidate-rows, then reports q of CMA-ES's mean:
- full: every candidate on the same 128 rows (the search's fixed minibatch);
- raced: the same rows, raced over rungs 32, 64, 128 at delta 0.05 (hyper_es/search/racing.py, `fitness.race`);
- noise-handler: pycma's NoiseHandler (maxevals [1, 1, 4], mean aggregation), each evaluation on 32 rows not used
  before by that candidate's evaluations (re-evaluating on the same rows would show it no noise), so 32 to 128 rows
  a candidate as it measures the noise; as pycma documents it, noise it measures also raises sigma;
- noise-handler-evals: the same with sigma left to CMA-ES (only the evaluations adapt), the handler's gentler use.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DIM, POPSIZE, TARGET, NOISE, ROWS, RUNG, GENERATIONS = 12, 8, 0.3, 0.3, 128, 32, 40
BUDGET = GENERATIONS * POPSIZE * ROWS


class Toy:
    def __init__(self, seed: int):
        self.difficulty = np.random.default_rng(seed).uniform(size=ROWS * 64)
        self.target, self.spent, self.seed = np.full(DIM, TARGET), 0, seed

    def quality(self, x) -> float:
        return max(0.0, 1 - float(np.linalg.norm(np.asarray(x) - self.target)) / 2)

    def rewards(self, x, lo: int, hi: int) -> np.ndarray:
        """x's rewards on rows lo..hi-1; every row's draw is x's and the row's alone."""
        key = int.from_bytes(hashlib.sha256(np.asarray(x, dtype=np.float64).tobytes()).digest()[:8], "little")
        noise = np.random.default_rng([self.seed, key]).normal(0, NOISE, size=hi)[lo:hi]
        self.spent += hi - lo
        return (self.quality(x) + noise > self.difficulty[lo:hi]).astype(float)


def strategy(seed: int):
    import cma

    return cma.CMAEvolutionStrategy(np.zeros(DIM).tolist(), 0.5, {"seed": seed + 1, "verbose": -9, "popsize": POPSIZE,
                                                                   "tolfun": 0, "tolflatfitness": float("inf")})


def run(arm: str, seed: int) -> dict:
    """One arm on one seed: q of the mean at each quarter of the budget, and the generations it made."""
    import cma

    from hyper_es.search.racing import race

    toy, es, curve, gens = Toy(seed), strategy(seed), {}, 0
    handled = arm.startswith("noise-handler")
    nh = cma.NoiseHandler(DIM, maxevals=[1, 1, ROWS // RUNG], aggregate=np.mean) if handled else None
    used: dict[bytes, int] = {}

    def fresh(x) -> float:  # the noise handler's evaluation: RUNG rows x has not been scored on
        k = np.asarray(x, dtype=np.float64).tobytes()
        lo = used.get(k, 0)
        used[k] = lo + RUNG
        return -float(toy.rewards(x, lo, lo + RUNG).mean())

    while toy.spent < BUDGET:
        if nh is None:
            xs = es.ask()
            if arm == "raced":
                told = race(lambda c, lo, hi: np.stack([toy.rewards(xs[i], lo, hi) for i in c]), len(xs),
                            [RUNG, 2 * RUNG, ROWS], es.sp.weights.mu, delta=0.05).told
            else:
                told = [toy.rewards(x, 0, ROWS).mean() for x in xs]
            es.tell(xs, [-f for f in told])
        else:
            xs, values = es.ask_and_eval(fresh, evaluations=nh.evaluations, aggregation=np.mean)
            es.tell(xs, values)
            factor = nh(xs, values, fresh, es.ask)
            es.sigma *= factor if arm == "noise-handler" else 1.0
        gens += 1
        for quarter in (1, 2, 3, 4):
            if toy.spent >= quarter * BUDGET / 4 and quarter not in curve:
                curve[quarter] = toy.quality(es.mean)
    return {"arm": arm, "seed": seed, "generations": gens, "spent": toy.spent,
            "quality_at_quarter": [curve[q] for q in (1, 2, 3, 4)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    arms = ("full", "raced", "noise-handler", "noise-handler-evals")
    runs = [run(arm, seed) for seed in range(args.seeds) for arm in arms]
    print(f"q(x0) = {Toy(0).quality(np.zeros(DIM)):.3f}; budget {BUDGET:,} candidate-rows; {args.seeds} seeds")
    print("| arm | q at 1/4, 1/2, 3/4, all of the budget (mean over seeds) | minus full at the end: mean [min, max] "
          "| generations |")
    print("|---|---|---|---|")
    full = {r["seed"]: r["quality_at_quarter"][-1] for r in runs if r["arm"] == "full"}
    summary = {}
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        q = np.mean([r["quality_at_quarter"] for r in mine], axis=0)
        d = [r["quality_at_quarter"][-1] - full[r["seed"]] for r in mine]
        summary[arm] = {"quality_mean": q.tolist(), "minus_full": [float(np.mean(d)), min(d), max(d)],
                        "generations_mean": float(np.mean([r["generations"] for r in mine]))}
        print(f"| {arm} | {', '.join(f'{v:.3f}' for v in q)} | {np.mean(d):+.4f} [{min(d):+.4f}, {max(d):+.4f}] "
              f"| {summary[arm]['generations_mean']:.1f} |")
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "summary": summary,
                                        "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
