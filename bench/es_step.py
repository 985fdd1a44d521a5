"""One full-parameter ES iteration's cost split, and peak memory of an ES iteration, a Hyper-ES candidate and a
GRPO-LoRA step on the same model.

    python bench/es_step.py --population 4 --prompts 64               # SmolLM2-135M, vLLM-CPU, fp32
    python bench/es_step.py --only split                              # the cost split alone

Split (one process, one resident vLLM engine with the ES worker), an iteration as `es_search` runs it: per
member, noise generation and install (measured in the worker) and generation, members back to back (each is
installed from θ's fp32 master, so no restore between them); then the update with every member's z non-zero
(it regenerates each member's noise), whose install of θ_{t+1} is the restore. Reported as fractions of the
iteration, so the ratio holds on a shared machine; one split per noise kind (`--noise table generator`: the shared
table's windows against a generator per tensor), side by side in one run. Memory: each workload runs in its own subprocess, and a sampler adds up
the RSS of that process and all its descendants (vLLM's engine core and worker) every 50 ms; the peak is reported.
Writes bench/results/es_step.json.
"""

from __future__ import annotations

import argparse
import tempfile
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _prompts(recipe, tok, n: int):
    from hyper_es.tasks import Task

    task = Task(recipe.tasks[0], recipe.base_dir)
    return task, task.prompt_ids(tok, task.rows("val" if task.cfg.val else "test")[:n])


def split(args, noise: str = "table") -> dict:
    from hyper_es.engine import es_engine
    from hyper_es.es.member import Member
    from hyper_es.es.noise import member_seeds
    from hyper_es.es.update import normalise
    from hyper_es.recipe import load_recipe

    recipe = load_recipe(args.recipe)
    recipe.es.scope, recipe.es.noise = args.scope, noise
    engine, tok = es_engine(recipe, "vllm")
    task, prompts = _prompts(recipe, tok, args.prompts)
    sampling = task.sampling()
    parts = {"noise_s": 0.0, "perturb_install_s": 0.0, "generate_s": 0.0, "update_s": 0.0}
    try:
        engine.generate(prompts, sampling)  # warm-up
        t_iter = time.perf_counter()
        seeds = member_seeds(0, 0, args.population)
        for seed in seeds:  # as in es_search: members back to back, each installed from θ's master
            t0 = time.perf_counter()
            engine.set_genome(Member(seed, 1e-3))
            t1 = time.perf_counter()
            parts["noise_s"] += engine.last_timing["noise_s"]
            parts["perturb_install_s"] += (t1 - t0) - engine.last_timing["noise_s"]
            engine.generate(prompts, sampling)
            parts["generate_s"] += time.perf_counter() - t1
        t3 = time.perf_counter()  # the update: the step's noise again, then θ_{t+1} installed (the restore)
        z = normalise(list(range(len(seeds)))).tolist()  # all non-zero, as z-scored rewards usually are
        engine.update(seeds, z, 1e-3, 1e-7, [1] * len(seeds))
        parts["update_s"] = time.perf_counter() - t3
        update_timing = dict(engine.last_timing)
        total = time.perf_counter() - t_iter
        t4 = time.perf_counter()
        engine.restore()  # a plain restore (θ from the master), for reference; not part of the iteration
        restore_s = time.perf_counter() - t4
    finally:
        engine.close()
    return {"noise": noise, "scope": args.scope, "population": args.population, "prompts": args.prompts, "tensors": len(engine.names),
            "noise_threads": update_timing.get("noise_threads"), "iteration_s": total, **parts, "update_detail": update_timing, "restore_once_s": restore_s,
            "overhead_fraction": (total - parts["generate_s"]) / total,
            "perturb_restore_fraction": (parts["noise_s"] + parts["perturb_install_s"]
                                         + update_timing.get("install_s", 0.0)) / total}


def _workload(kind: str, args) -> None:
    """Run one workload (in a subprocess whose peak memory the parent samples)."""
    from hyper_es.recipe import load_recipe

    recipe = load_recipe(args.recipe)
    if kind == "es":
        args.population = 2
        split(args, args.noise[0])
    elif kind == "hyper-es":
        import numpy as np

        from hyper_es.directions import DirectionSet
        from hyper_es.engine import inplace_engine
        from hyper_es.merging import recipe_genome

        ds = DirectionSet.from_run(args.run)
        genome, settings = recipe_genome(recipe, ds)
        engine, tok = inplace_engine(recipe, "vllm", ds, genome, settings, Path(args.tmp) / "engine", seed=0)
        task, prompts = _prompts(recipe, tok, args.prompts)
        try:
            engine.set_genome(np.asarray(genome.initial("ones", 1.0)))
            engine.generate(prompts, task.sampling())
        finally:
            engine.close()
    elif kind == "grpo":
        import shutil

        from hyper_es.directions.collect import collect

        shutil.rmtree(Path(args.tmp) / "grpo", ignore_errors=True)  # a fresh run folder: one job of one step

        data = recipe.model_dump(mode="json")
        data["gradient"].update(directions=1, steps=1, directions_from="jobs", baseline_snapshot_every=0, jobs=[])
        from hyper_es.recipe import recipe_from_dict

        collect(recipe_from_dict(data, args.recipe), Path(args.tmp) / "grpo")


def peak_rss(cmd: list[str]) -> float:
    import psutil

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root, peak = psutil.Process(proc.pid), 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    rc = proc.wait()
    done.set()
    t.join()
    if rc:
        raise SystemExit(f"{' '.join(cmd)} failed with exit {rc}")
    return peak / 2**30


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes/smollm2-135m.yaml")
    p.add_argument("--population", type=int, default=4)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--scope", default="all_linear", choices=["all_linear", "full", "lora"])
    p.add_argument("--only", choices=["split", "memory"])
    p.add_argument("--noise", nargs="+", default=["table", "generator"], choices=["table", "generator"],
                   help="noise kinds to split (the memory workloads use the first)")
    p.add_argument("--result", type=Path, default=ROOT / "bench/results/es_step.json")
    p.add_argument("--run", type=Path, help="a run folder with directions (Hyper-ES candidate memory)")
    p.add_argument("--workload", choices=["es", "hyper-es", "grpo"], help=argparse.SUPPRESS)
    p.add_argument("--tmp", default=str(Path(tempfile.gettempdir()) / "es_step"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.workload:
        return _workload(args.workload, args)
    out = {"command": f"python {' '.join(sys.argv)}"}
    if args.only != "memory":  # one split per noise kind, in one run (side by side)
        out["split"] = {kind: split(args, kind) for kind in args.noise}
        print(json.dumps(out["split"], indent=1))
    if args.only != "split":
        me = [sys.executable, __file__, "--recipe", str(args.recipe), "--prompts", str(args.prompts), "--scope",
              args.scope, "--noise", args.noise[0]]
        out["peak_rss_gib"] = {k: peak_rss(me + ["--workload", k] + (["--run", str(args.run)] if args.run else []))
                               for k in ("es", "grpo", *(["hyper-es"] if args.run else []))}
        print(json.dumps(out["peak_rss_gib"], indent=1))
    path = args.result
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}\ncommand: {out['command']}")


if __name__ == "__main__":
    main()
