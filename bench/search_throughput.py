"""Search throughput, side by side in one run: candidates scored per minute on the same minibatch, each path pinned.

    python bench/search_throughput.py --run RUN --recipe recipes/smollm2-135m.yaml \
        [--paths inplace-fp32:6,lora-fp32:2,lora-bf16:2,disk-fp32:2,hf-fp32:2]

- inplace-<dtype>: our loop, one resident vLLM engine, merged weights rewritten in place inside the worker per
  candidate (serve.candidates: inplace);
- lora-<dtype>: one resident vLLM engine serving each candidate as a LoRA adapter (serve.candidates: lora), what
  `auto` takes for a linear merge in a 16-bit engine on a GPU;
- disk-<dtype>: mergekit-evolve's path, merge to disk (our `export_hf`, which is faster than mergekit) and a new vLLM
  engine per candidate;
- hf-<dtype>: one resident HF model, merged weights copied in per candidate.
Each path runs in its own child process, one after the other, on the same candidates (seeded) and the same prompts
(the recipe's search tasks, `fitness.minibatch` train rows each, greedy), one candidate per engine call. A candidate's
time is everything from the new coefficient vector to its fitness: merge, load, generation and scoring. The one-time
engine start is reported apart, with the fraction of wall time spent outside generation.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class DiskEngine:
    """(b): every candidate is merged to a folder and served by a fresh vLLM engine."""

    def __init__(self, ds, genome, settings, workdir: Path, tok, **engine_kwargs):
        self.ds, self.genome, self.settings, self.workdir, self.tok = ds, genome, settings, workdir, tok
        self.kwargs, self.gen, self.n = engine_kwargs, None, 0

    def set_genome(self, x) -> None:
        import shutil

        from hyper_es.engine.vllm import VLLMGenerator
        from hyper_es.export import export_hf

        self.close()
        folder = self.workdir / f"candidate-{self.n}"
        self.n += 1
        export_hf(self.ds, self.genome, x, self.settings, folder)
        self.gen = VLLMGenerator(folder, self.tok, **self.kwargs)
        self.gen.show_progress = False
        shutil.rmtree(folder)  # the engine has loaded it

    def generate_groups(self, groups):
        return self.gen.generate_groups(groups)

    def restore(self) -> None:
        pass

    def close(self) -> None:
        if self.gen is not None:
            self.gen.close()
            self.gen = None


def child(kind: str, run: str, recipe_path: str, n: int, workdir: str, minibatch: int | None) -> dict:
    """One pinned path, `kind` = <path>-<dtype>."""
    import numpy as np
    from transformers import AutoTokenizer

    import hyper_es as hx
    from hyper_es.merging import MergeSettings, genome_for
    from hyper_es.engine import inplace_engine
    from hyper_es.fitness.rows import draw_rows
    from hyper_es.fitness import Scorer
    from hyper_es.tasks import Task

    recipe = hx.load_recipe(recipe_path)
    s, m = recipe.search, recipe.merge
    ds = hx.DirectionSet.from_run(run)
    genome = genome_for(ds, layer_group_size=m.layer_group_size, module_groups=m.module_groups, bounds=s.bounds)
    settings = MergeSettings.from_config(m)
    tasks = [Task(recipe.task(t), recipe.base_dir) for t in s.tasks]
    rows = {t.name: draw_rows(t.rows("train"), minibatch or s.minibatch, 12345) for t in tasks}
    rng = np.random.default_rng(0)
    lo, hi = genome.lower_upper()
    xs = [np.clip(genome.uniform(1.0 / len(ds)) + rng.normal(0, s.sigma0, genome.size), lo, hi) for _ in range(n)]
    path, dtype = kind.split("-")
    dtype = {"fp32": "float32", "bf16": "bfloat16"}[dtype]
    engine_kw = dict(dtype=dtype, max_model_len=recipe.model.max_model_len, seed=s.seed)
    t0 = time.perf_counter()
    if path == "disk":
        tok = AutoTokenizer.from_pretrained(ds.base_path)
        engine = DiskEngine(ds, genome, settings, Path(workdir), tok, **engine_kw)
    else:
        recipe.eval.dtype = dtype
        recipe.serve.candidates = "inplace" if path in ("inplace", "hf") else "lora"
        recipe.serve.lossy_inplace = True  # pinned: the bench times the path, whatever its fidelity
        engine, tok = inplace_engine(recipe, "hf" if path == "hf" else "vllm", ds, genome, settings,
                                     Path(workdir) / "engine", seed=s.seed, fused=s.compile_merge)
        assert getattr(engine, "candidates", "inplace") == ("lora" if path == "lora" else "inplace")
    startup = time.perf_counter() - t0
    scorer = Scorer(engine, tok, tasks)
    scorer.score(genome.uniform(0.0), {t: r[:2] for t, r in rows.items()})  # warm-up (prompt ids, first call)
    per = []
    try:
        for x in xs:
            t = time.perf_counter()
            sc = scorer.score(x, rows)
            per.append({"wall_s": time.perf_counter() - t, "fitness": sc.reward, "tokens": sc.tokens, **sc.timing,
                        **getattr(engine, "last_timing", {})})
    finally:
        engine.close()
    wall = sum(p["wall_s"] for p in per)
    return {"kind": kind, "dtype": dtype, "candidates": n, "startup_s": startup, "wall_s": wall, "candidates_per_min": 60 * n / wall,
            "outside_generation": sum(p["merge_load_s"] + p["score_s"] for p in per) / wall,
            "prompts_per_candidate": sum(map(len, rows.values())), "per_candidate": per}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="run directory with the gradient stage's directions")
    ap.add_argument("--recipe", default=str(ROOT / "recipes/smollm2-135m.yaml"))
    ap.add_argument("--paths", default="inplace-fp32:6,lora-fp32:2,lora-bf16:2,disk-fp32:2,hf-fp32:2",
                    help="path-dtype:candidates, comma-separated, timed in this order")
    ap.add_argument("--minibatch", type=int, help="prompts per task per candidate (default: the recipe's)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/search_throughput.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.run, args.recipe, args.n, args.workdir, args.minibatch)))
        return
    import tempfile

    paths = [(p.split(":")[0], int(p.split(":")[1])) for p in args.paths.split(",")]
    results = {}
    for kind, n in paths:
        with tempfile.TemporaryDirectory() as work:
            proc = subprocess.run([sys.executable, __file__, "--run", args.run, "--recipe", args.recipe, "--child",
                                   kind, "--n", str(n), "--workdir", work,
                                   *(["--minibatch", str(args.minibatch)] if args.minibatch else [])],
                                  capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode or line is None:
            sys.exit(f"{kind} failed:\n{proc.stderr[-3000:]}")
        results[kind] = r = json.loads(line[7:])
        print(f"{kind}: {r['candidates_per_min']:.2f} candidates/min ({r['candidates']} candidates, "
              f"{r['wall_s']:.1f} s; startup {r['startup_s']:.1f} s; outside generation {r['outside_generation']:.1%})",
              flush=True)
    first = paths[0][0]
    ratios = {k: results[first]["candidates_per_min"] / r["candidates_per_min"] for k, r in results.items() if k != first}
    summary = {"command": " ".join(["python", "bench/search_throughput.py", *sys.argv[1:]]), "reference": first,
               "reference_over": ratios, "results": results}
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print("  ".join(f"{first}/{k} = {v:.2f}x" for k, v in ratios.items()) + f"  -> {args.out}")


if __name__ == "__main__":
    main()
