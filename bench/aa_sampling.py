"""A/A: the same weights (the base) sampled in fresh vLLM engines, on the recipe's trained tasks. Two runs at the
evaluation seed must give the same samples (per-problem seeds); a run at another seed shows the spread a seed
alone gives, which is what no sampled difference smaller than it can be told apart from.

    python bench/aa_sampling.py --recipe recipes/smollm2-135m.yaml --problems 200 --n 8
                                                                     # bench/results/aa_sampling.{json,md}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hyper_es.io import write_json_atomic  # noqa: E402


def sample_run(recipe, tasks, problems: int, n: int, seed: int) -> dict:
    """One fresh engine: per task, per-problem correct counts of n samples at the eval temperature."""
    from hyper_es.engine import make_generator
    from hyper_es.evaluate import evaluate_task

    e, m = recipe.eval, recipe.model
    gen, tok = make_generator("vllm", m.name, dtype=e.dtype, model_dtype=m.dtype, max_model_len=m.max_model_len,
                              seed=seed)
    try:
        out = {}
        for task in tasks:
            res = evaluate_task(gen, tok, task, ks=(1,), limit=problems,
                                sampling=task.sampling(n=n, temperature=e.temperature, top_p=e.top_p, seed=seed))
            out[task.name] = {"ids": [r["id"] for r in res.records], "completions": [r["completions"] for r in res.records],
                              "correct": [sum(s >= 1.0 for s in r["scores"]) for r in res.records],
                              "seconds": res.seconds, "tokens": res.tokens}
        return out
    finally:
        gen.close()


def compare(a: dict, b: dict, n: int) -> dict:
    """Paired Pass@1 difference pooled over tasks (bootstrap CI), and the share of problems with identical samples."""
    from hyper_es.evaluate.stats import paired_bootstrap

    strata = [(np.array(a[t]["correct"]) / n, np.array(b[t]["correct"]) / n) for t in a]
    same = sum(x == y for t in a for x, y in zip(a[t]["completions"], b[t]["completions"]))
    total = sum(len(a[t]["ids"]) for t in a)
    return {**paired_bootstrap(strata).to_dict(), "identical_problems": same, "problems": total}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes/smollm2-135m.yaml")
    p.add_argument("--problems", type=int, default=200)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--other-seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=ROOT / "bench/results/aa_sampling")
    args = p.parse_args()
    from hyper_es.progress import setup_logging
    from hyper_es.recipe import load_recipe
    from hyper_es.tasks import Task

    setup_logging()
    recipe = load_recipe(args.recipe)
    tasks = [Task(recipe.task(t), recipe.base_dir) for t in recipe.training_task_names()]
    seed = recipe.eval.seed
    runs = {"A": sample_run(recipe, tasks, args.problems, args.n, seed),
            "A'": sample_run(recipe, tasks, args.problems, args.n, seed),
            "B": sample_run(recipe, tasks, args.problems, args.n, args.other_seed)}
    result = {"recipe": str(args.recipe.relative_to(ROOT)) if args.recipe.is_relative_to(ROOT) else str(args.recipe),
              "model": recipe.model.name, "dtype": recipe.eval.dtype, "problems_per_task": args.problems, "n": args.n,
              "temperature": recipe.eval.temperature, "seeds": {"A": seed, "A'": seed, "B": args.other_seed},
              "pass@1": {k: {t: float(np.mean(r[t]["correct"]) / args.n) for t in r} for k, r in runs.items()},
              "same seed (A - A')": compare(runs["A"], runs["A'"], args.n),
              "other seed (A - B)": compare(runs["A"], runs["B"], args.n),
              "seconds": {k: sum(r[t]["seconds"] for t in r) for k, r in runs.items()},
              "command": f"python {' '.join(sys.argv)}"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out.with_suffix(".json"), result)
    lines = [f"# A/A sampling: {result['model']} ({result['dtype']}), {args.problems} test problems per trained task "
             f"× {args.n} samples at T = {result['temperature']}", "",
             "| comparison | Pass@1 difference, points [95% CI] | problems with identical samples |", "|---|---|---|"]
    for key in ("same seed (A - A')", "other seed (A - B)"):
        d = result[key]
        lines.append(f"| {key} | {100 * d['diff']:+.2f} [{100 * d['low']:.2f}, {100 * d['high']:.2f}] | "
                     f"{d['identical_problems']} / {d['problems']} |")
    lines += ["", f"Command: `{result['command']}`"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
