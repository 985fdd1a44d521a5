"""A generation's candidates in place one by one vs as LoRA adapters in one call, side by side in one run.

    python bench/population_lora.py --run RUN --recipe RECIPE [--popsize 8] [--minibatch 8] [--dtypes float32,bfloat16]

For each engine dtype, two child processes, one after the other (one engine at a time), score the same candidates
(seeded around x0 = the recipe's, σ = search.sigma0) on the same fitness rows (the recipe's search tasks,
`--minibatch` train rows each, greedy):
(a) inplace: a vLLM engine without LoRA writes base + ΔW into its weights per candidate (`serve.candidates: inplace`);
(b) lora: a vLLM engine with LoRA serves every candidate as its own adapter, the whole generation in one `generate`
    call (`serve.candidates: lora`, max_loras = popsize).
A path's time is the generation's, from the coefficient vectors to their Scores (adapters built and registered, or
weights merged and written, generation, scoring); engine start and one warm-up are reported apart. The Scores are
compared candidate by candidate (reward, rows whose reward agrees, tokens), with each path's fidelity. In fp32 both
paths serve the same model; in bf16 the in-place path rounds most of a small update away, the adapter does not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(path: str, dtype: str, run: str, recipe_path: str, popsize: int, minibatch: int, workdir: str) -> dict:
    import numpy as np

    import hyper_es as hx
    from hyper_es.engine import run_engine
    from hyper_es.fitness import Scorer
    from hyper_es.fitness.rows import draw_rows
    from hyper_es.merging import recipe_genome
    from hyper_es.tasks import Task

    recipe = hx.load_recipe(recipe_path)
    recipe.eval.dtype, recipe.serve.candidates = dtype, path
    s = recipe.search
    ds = hx.DirectionSet.from_run(run)
    genome, _ = recipe_genome(recipe, ds)
    tasks = [Task(recipe.task(t), recipe.base_dir) for t in s.tasks]
    rows = {t.name: draw_rows(t.rows("train"), minibatch, 12345) for t in tasks}
    x0 = genome.initial(s.x0, recipe.merge.density)
    lo, hi = genome.lower_upper()
    rng = np.random.default_rng(0)
    xs = [np.clip(x0 + rng.normal(0, s.sigma0, genome.size), lo, hi) for _ in range(popsize)]
    t0 = time.perf_counter()
    engine, tok = run_engine(recipe, "vllm", run, Path(workdir) / "engine", seed=s.seed, batch=popsize)
    startup = time.perf_counter() - t0
    try:
        scorer = Scorer(engine, tok, tasks)
        t1 = time.perf_counter()
        scorer.score_many([x0], {t: r[:2] for t, r in rows.items()})  # warm-up: prompt ids, first call
        warm = time.perf_counter() - t1
        t2 = time.perf_counter()
        scores = scorer.score_many(xs, rows)
        wall = time.perf_counter() - t2
    finally:
        engine.close()
    return {"path": path, "dtype": dtype, "candidates": popsize, "prompts_per_candidate": sum(map(len, rows.values())),
            "startup_s": startup, "warmup_s": warm, "wall_s": wall, "candidates_per_s": popsize / wall,
            "tokens": sum(sc.tokens for sc in scores), "rewards": [sc.reward for sc in scores],
            "per_row": [sc.per_row for sc in scores], "fidelity": [sc.fidelity for sc in scores]}


def compare(a: dict, b: dict) -> dict:
    rows = [sum(x == y for x, y in zip(ra, rb, strict=True)) / len(ra)
            for ra, rb in zip(a["per_row"], b["per_row"], strict=True)]
    return {"speed_lora_over_inplace": b["candidates_per_s"] / a["candidates_per_s"],
            "same_reward": sum(x == y for x, y in zip(a["rewards"], b["rewards"], strict=True)),
            "max_reward_gap": max(abs(x - y) for x, y in zip(a["rewards"], b["rewards"], strict=True)),
            "rows_agree": float(sum(rows) / len(rows)),
            "tokens_ratio": b["tokens"] / a["tokens"],
            "fidelity_max_inplace": max(a["fidelity"]), "fidelity_max_lora": max(b["fidelity"])}


def against_fp32(ref: dict, other: dict) -> dict:
    """How close a bf16 path's Scores come to the fp32 ones (in place, exact): rows with the same reward, mean
    |reward gap|. The base model itself differs in bf16, so neither path reaches 1."""
    pairs = [(a, b) for ra, rb in zip(ref["per_row"], other["per_row"], strict=True) for a, b in zip(ra, rb)]
    return {"rows_agree": sum(a == b for a, b in pairs) / len(pairs),
            "mean_reward_gap": sum(abs(a - b) for a, b in zip(ref["rewards"], other["rewards"])) / len(ref["rewards"])}


def summarize(results: dict, popsize: int) -> dict:
    comparisons = {}
    for dtype in dict.fromkeys(k.split("-", 1)[1] for k in results):
        c = comparisons[dtype] = compare(results[f"inplace-{dtype}"], results[f"lora-{dtype}"])
        print(f"{dtype}: lora / inplace = {c['speed_lora_over_inplace']:.2f}x candidates/s; equal rewards "
              f"{c['same_reward']}/{popsize} (largest gap {c['max_reward_gap']:.4f}); rows agreeing "
              f"{c['rows_agree']:.1%}; fidelity in place {c['fidelity_max_inplace']:.3f}, lora "
              f"{c['fidelity_max_lora']:.4f}", flush=True)
        if dtype != "float32" and "inplace-float32" in results:
            for path in ("inplace", "lora"):
                c[f"{path}_vs_fp32"] = g = against_fp32(results["inplace-float32"], results[f"{path}-{dtype}"])
                print(f"  {path} {dtype} against the fp32 Scores: rows agreeing {g['rows_agree']:.1%}, mean |reward "
                      f"gap| {g['mean_reward_gap']:.4f}", flush=True)
    return comparisons


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", help="run directory with the gradient stage's LoRA directions")
    ap.add_argument("--recipe", default=str(ROOT / "recipes/smollm2-135m.yaml"))
    ap.add_argument("--popsize", type=int, default=8, help="candidates of the generation")
    ap.add_argument("--minibatch", type=int, default=8, help="fitness rows per task")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="engine dtypes, each a pair of paths")
    ap.add_argument("--out", default=str(ROOT / "bench/results/population_lora.json"))
    ap.add_argument("--summarize", action="store_true", help="only recompute the comparisons of --out's results")
    ap.add_argument("--child", nargs=2, metavar=("PATH", "DTYPE"), help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.summarize:
        summary = json.loads(Path(args.out).read_text())
        first = next(iter(summary["results"].values()))
        summary["comparisons"] = summarize(summary["results"], first["candidates"])
        Path(args.out).write_text(json.dumps(summary, indent=1))
        return
    if not args.run:
        ap.error("--run is required")
    if args.child:
        out = child(*args.child, args.run, args.recipe, args.popsize, args.minibatch, args.workdir)
        print("RESULT " + json.dumps(out))
        return
    import tempfile

    results = {}
    for dtype in args.dtypes.split(","):
        for path in ("inplace", "lora"):
            with tempfile.TemporaryDirectory() as work:
                cmd = [sys.executable, __file__, "--run", args.run, "--recipe", args.recipe, "--popsize",
                       str(args.popsize), "--minibatch", str(args.minibatch), "--child", path, dtype, "--workdir", work]
                proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode or line is None:
                sys.exit(f"{path} {dtype} failed:\n{proc.stderr[-3000:]}")
            r = results[f"{path}-{dtype}"] = json.loads(line[7:])
            print(f"{path:8s} {dtype:9s} {r['candidates_per_s']:.3f} candidates/s ({r['candidates']} candidates x "
                  f"{r['prompts_per_candidate']} prompts, {r['wall_s']:.1f} s; start {r['startup_s']:.0f} s); "
                  f"fidelity max {max(r['fidelity']):.4f}", flush=True)
    summary = {"command": " ".join(["python", "bench/population_lora.py", *sys.argv[1:]]),
               "comparisons": summarize(results, args.popsize), "results": results}
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
