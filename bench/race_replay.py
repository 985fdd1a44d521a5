"""What racing (`fitness.race`) would have decided on a finished search's own generations, without an engine.

    python bench/race_replay.py RUN --rungs 32 64 128 --deltas 0.05 0.1 0.2 [--out bench/results/race_replay.json]

A search logs each candidate's reward per fitness row (`per_row` in RUN/search/generations.jsonl, from this version
on). For each generation and delta, the replay races the candidates over the rungs (search/racing.py, the rows
interleaved across tasks as the search interleaves them) and prints the evaluations against full scoring and whether
the told ranking keeps the same parents (pycma's mu best) as the full means. It replays each generation as it was
scored: a raced search would have asked other candidates after its first generation, so this measures the first
decision only, generation by generation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def interleaved(per_row: list[float], sizes: list[int]) -> np.ndarray:
    """Rewards in task-then-row order (the Scorer's) put in the search's racing order (search/racing.py)."""
    from hyper_es.search import racing

    starts = np.cumsum([0, *sizes[:-1]])
    order = racing.interleaved({str(k): n for k, n in enumerate(sizes)})
    return np.array([per_row[starts[int(k)] + i] for k, i in order], dtype=float)


def replay(records: list[dict], sizes: list[int], rungs: list[int], delta: float, parents: int) -> dict:
    """Evaluations (raced, full) and the generations whose parents changed, over records that logged per_row."""
    from hyper_es.search.racing import race

    raced = full = changed = 0
    used = [r for r in records if r.get("per_row")]
    for r in used:
        rewards = np.stack([interleaved(p, sizes) for p in r["per_row"]])
        total = rewards.shape[1]
        steps = [k for k in rungs if k < total] + [total]
        out = race(lambda cands, lo, hi: rewards[cands, lo:hi], len(rewards), steps, parents, delta=delta)
        raced, full = raced + out.evaluations, full + rewards.size
        top = set(np.argsort(-rewards.mean(axis=1), kind="stable")[:parents])
        changed += top != set(np.argsort(-np.asarray(out.told), kind="stable")[:parents])
    return {"delta": delta, "generations": len(used), "evaluations": raced, "full": full,
            "saved": 1 - raced / full if full else 0.0, "parents_changed": changed}


def task_sizes(run: Path, rows: int) -> list[int]:
    """Rows per searched task of the run's fitness minibatch (its recipe; equal shares where the pool allows)."""
    from hyper_es.fitness import fitness_splits
    from hyper_es.recipe import load_recipe

    recipe = load_recipe(run / "recipe.yaml")
    _, pool, _ = fitness_splits(recipe)
    sizes = [min(recipe.fitness.minibatch, len(r)) for r in pool.values()]
    if sum(sizes) != rows:
        raise SystemExit(f"{run}: {rows} rows logged per candidate, but the recipe's minibatch gives {sizes}")
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--rungs", type=int, nargs="+", required=True)
    ap.add_argument("--deltas", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    records = [json.loads(x) for x in (args.run / "search" / "generations.jsonl").read_text().splitlines()]
    logged = [r for r in records if r.get("per_row")]
    if not logged:
        raise SystemExit(f"{args.run}: no generation logged per_row (a search made before they were logged)")
    import cma

    popsize = len(logged[0]["per_row"])
    parents = int(cma.CMAEvolutionStrategy([0.0, 0.0], 1.0, {"popsize": popsize, "verbose": -9}).sp.weights.mu)
    sizes = task_sizes(args.run, len(logged[0]["per_row"][0]))
    results = [replay(records, sizes, args.rungs, d, parents) for d in args.deltas]
    print(f"{args.run}: {len(logged)} generations, popsize {popsize}, parents {parents}, rows {sizes}, "
          f"rungs {args.rungs}")
    for r in results:
        print(f"delta {r['delta']:g}: {r['evaluations']} of {r['full']} candidate-rows ({100 * r['saved']:.1f}% "
              f"saved); parents changed in {r['parents_changed']} of {r['generations']} generations")
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "run": args.run.name, "rungs": args.rungs,
                                        "parents": parents, "sizes": sizes, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
