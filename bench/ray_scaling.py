"""Generation wall time on an engine pool of 1 and 2 Ray actors, against the local executor, same candidates.

    python bench/ray_scaling.py --run ROOT/decide/seed0-lr0.00025 --candidates 8 --rows 32

`--run` is a run folder with directions (its recipe.yaml is used, one thread per engine). Each setting builds its
engines first (not timed), scores one warm-up candidate, then times `score_many` over the same `--candidates`
genomes (random around x0) on the same fitness rows; the Scores must agree across settings (checked). Reported
as ratios to the local executor from one run, as on this shared machine bare timings mean little. Writes
bench/results/ray_scaling.json.
"""

from __future__ import annotations

import argparse
import tempfile
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(recipe, run: Path, xs, rows, engines: int | None, backend: str, workdir: Path) -> tuple[float, list]:
    """(seconds for score_many over xs, the Scores) with the local engine (engines None) or a pool."""
    from hyper_es.engine import run_engine
    from hyper_es.fitness.pool import EnginePool, resident_scorer

    if engines is None:
        engine, scorer = resident_scorer(recipe, run_engine, {"run_dir": str(run), "backend": backend,
                                                               "workdir": str(workdir / "local"), "seed": 0,
                                                               "fused": True})
    else:
        from hyper_es.recipe import recipe_from_dict

        data = recipe.model_dump(mode="json")
        data["executor"] = {"kind": "ray", "engines": engines}
        engine = scorer = EnginePool(recipe_from_dict(data, recipe._path), run_engine, run_dir=str(run),
                                     backend=backend, workdir=str(workdir / f"pool{engines}"), seed=0, fused=True)
    try:
        scorer.score_many(xs[:engines or 1], rows)  # warm-up: every actor once
        t0 = time.perf_counter()
        scores = scorer.score_many(xs, rows)
        return time.perf_counter() - t0, scores
    finally:
        engine.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--rows", type=int, default=32, help="fitness rows per task")
    p.add_argument("--backend", default="vllm", choices=["vllm", "hf"])
    p.add_argument("--result", type=Path, default=ROOT / "bench/results/ray_scaling.json")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ray_scaling")
    args = p.parse_args()
    import numpy as np
    import ray

    from hyper_es.directions import DirectionSet
    from hyper_es.merging import recipe_genome
    from hyper_es.progress import setup_logging
    from hyper_es.recipe import load_run_recipe
    from hyper_es.fitness import fitness_splits

    setup_logging()
    recipe = load_run_recipe(args.run)
    recipe.threads = 1
    genome, _ = recipe_genome(recipe, DirectionSet.from_run(args.run))
    x0 = np.asarray(genome.initial("ones", recipe.merge.density))
    rng = np.random.default_rng(0)
    xs = [x0 + 0.2 * rng.standard_normal(x0.shape) for _ in range(args.candidates)]
    _, pool_rows, _ = fitness_splits(recipe)
    rows = {n: r[: args.rows] for n, r in pool_rows.items()}
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        out, ref = {}, None
        for label, engines in (("local", None), ("1 actor", 1), ("2 actors", 2)):
            seconds, scores = measure(recipe, args.run, xs, rows, engines, args.backend, args.workdir)
            rewards = [s.reward for s in scores]
            ref = ref or rewards
            out[label] = {"seconds": seconds, "same_scores_as_local": rewards == ref}
            print(f"{label}: {seconds:.1f} s for {len(xs)} candidates", flush=True)
    finally:
        ray.shutdown()
    base = out["local"]["seconds"]
    for v in out.values():
        v["ratio_to_local"] = v["seconds"] / base
    result = {"command": f"python {' '.join(sys.argv)}", "backend": args.backend, "candidates": len(xs),
              "rows_per_task": args.rows, "settings": out}
    args.result.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
