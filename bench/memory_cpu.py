"""Measure each stage's peak host memory on CPU (SmolLM2-135M) beside the memory plan's CPU estimate: the same
accounting as the GPU plan (weights, LoRA and optimizer, activations, logits, the engine's KV cache, what the worker
holds beside vLLM), with host memory for the card. Each stage runs in a fresh process; its peak is the process's
peak RSS (ru_maxrss), plus the vLLM worker's (VmHWM) for the engine stages. The plan counts what tensors and imports
hold, so the stages run with glibc returning each freed block of 128 KiB or more at once (MALLOC_MMAP_THRESHOLD_);
with `--default-malloc`, under glibc's default (its mmap threshold grows, and freed heap stays in the process), which
`--both` reports beside it.

    python bench/memory_cpu.py [--recipe recipes/smollm2-135m.yaml] [--quick] [--out bench/results/memory_cpu.json]

`--quick`: the recipe as `hyper-es run --quick` scales it (what `make demo` runs; the tests measure that one).

The stages are scaled to run in about a minute each: a 1-step GRPO-LoRA job with the recipe's batch, and resident
engines over random LoRA directions of the recipe's rank (K for the search, K + baseline + snapshots for the final
evaluation) scoring one candidate."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("gradient job", "search engine", "final-evaluation engine")
RETURNING = {"MALLOC_MMAP_THRESHOLD_": "131072"}  # glibc: blocks of 128 KiB or more are mmapped, and unmapped on free


def _peak_self() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def gradient_job(recipe, work: Path) -> dict:
    from hyper_es import models
    from hyper_es.directions.jobs import plan_directions
    from hyper_es.directions.train import run_job
    from hyper_es.models.identity import weights_hash

    job = plan_directions(recipe)[0]
    job = type(job)(**{**job.__dict__, "steps": 1})
    base = weights_hash(models.resolve(recipe.model.name, revision=recipe.model.revision))
    run_job(recipe, job, work, base)
    return {"processes": {"job": _peak_self()}}


def engine(recipe, work: Path, stage: str) -> dict:
    import numpy as np
    import psutil
    import torch

    import hyper_es as hx
    from hyper_es import models
    from hyper_es.directions.sources import Direction, LoraFactors, tensor_shapes
    from hyper_es.engine import Sampling, inplace_engine
    from hyper_es.memory.plan import direction_ranks, final_directions
    from hyper_es.merging import MergeSettings, genome_for

    path = models.resolve(recipe.model.name, revision=recipe.model.revision)
    k = len(direction_ranks(recipe)) if stage == "search engine" else final_directions(recipe)
    r, targets = recipe.gradient.lora.r, tuple(recipe.gradient.lora.targets)
    shapes = {t: s for t, s in tensor_shapes(path).items() if t.removesuffix(".weight").rsplit(".", 1)[-1] in targets}
    gen = torch.Generator().manual_seed(0)
    ds = hx.DirectionSet(str(path), [Direction(f"d{i}", {t: LoraFactors(torch.randn(r, s[1], generator=gen) * 1e-3,
                                                                          torch.randn(s[0], r, generator=gen) * 1e-3,
                                                                          2.0) for t, s in shapes.items()})
                                     for i in range(k)])
    genome = genome_for(ds, layer_group_size=recipe.merge.layer_group_size)
    batch = recipe.search.popsize if stage == "search engine" else None
    eng, tok = inplace_engine(recipe, "vllm", ds, genome, MergeSettings.from_config(recipe.merge), work,
                              seed=0, fused=recipe.serve.compile_merge, batch=batch, stage=stage)
    try:
        ids = [tok.encode(f"What is {i} + {i + 7}?") for i in range(16)]
        eng.set_genome(np.random.default_rng(0).uniform(0, 1, genome.size))
        eng.generate(ids, Sampling(max_tokens=16))
        workers = [p for p in psutil.Process().children(recursive=True)]
        peaks = {"driver": _peak_self(), **{f"worker {p.pid}": _hwm(p.pid) for p in workers}}
    finally:
        eng.close()
    return {"processes": peaks, "directions": k, "candidates": eng.candidates}


def load(recipe_path: str, quick: bool = False):
    from hyper_es.pipeline import quick as scaled
    from hyper_es.recipe import load_recipe

    recipe = load_recipe(recipe_path)
    return scaled(recipe).model_copy(update={"threads": 1}) if quick else recipe  # measured on one core


def run_stage(recipe_path: str, stage: str, quick: bool = False) -> dict:
    """One stage in this process (a fresh one: see main), on one thread."""
    import torch

    torch.set_num_threads(1)
    recipe = load(recipe_path, quick)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = gradient_job(recipe, Path(tmp)) if stage == "gradient job" else engine(recipe, Path(tmp), stage)
    return {**out, "peak": sum(out["processes"].values()), "seconds": round(time.perf_counter() - t0, 1)}


def host_plan(recipe_path: str, quick: bool = False):
    """The CPU memory plan of the recipe, its micro-batch length from the longest training prompt."""
    from transformers import AutoTokenizer

    from hyper_es import models
    from hyper_es.directions.train import longest_prompt
    from hyper_es.memory import cpu_plan, model_config

    recipe = load(recipe_path, quick)
    tok = AutoTokenizer.from_pretrained(models.resolve(recipe.model.name, revision=recipe.model.revision))
    return cpu_plan(recipe, model_config(recipe.model.name)[0], prompt_tokens=longest_prompt(recipe, tok))


def measure(recipe_path: str, stage: str, default_malloc: bool = False, quick: bool = False) -> dict:
    """Run `stage` in a fresh process and return what it measured."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if not default_malloc:
        env.update(RETURNING)
    res = subprocess.run([sys.executable, __file__, "--stage", stage, "--recipe", recipe_path,
                          *(["--quick"] if quick else [])], env=env,
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"stage {stage} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default=str(ROOT / "recipes/smollm2-135m.yaml"))
    ap.add_argument("--stage", choices=STAGES)
    ap.add_argument("--quick", action="store_true", help="the recipe as hyper-es run --quick scales it")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--default-malloc", action="store_true", help="measure under glibc's default allocator only")
    ap.add_argument("--both", action="store_true", help="also measure each stage under glibc's default allocator")
    args = ap.parse_args()
    if args.stage:  # the child: one stage, one JSON line
        print(json.dumps(run_stage(args.recipe, args.stage, args.quick)))
        return
    from hyper_es.memory import GIB

    plan = {s.name: s for s in host_plan(args.recipe, args.quick).stages}
    rows = []
    allocator = "glibc default" if args.default_malloc else "MALLOC_MMAP_THRESHOLD_=131072"
    print(f"{'stage':<26}{'measured GiB':>14}{'plan GiB':>10}{'plan/measured':>15}"
          + (f"{'default malloc GiB':>20}" if args.both else "") + f"   ({allocator})")
    for stage in STAGES:
        got = measure(args.recipe, stage, args.default_malloc, args.quick)
        ratio = plan[stage].peak / got["peak"]
        row = {"stage": stage, "measured": got, "plan": plan[stage].peak, "plan_parts": plan[stage].parts,
               "ratio": ratio}
        if args.both:
            row["measured_default_malloc"] = measure(args.recipe, stage, default_malloc=True, quick=args.quick)
        rows.append(row)
        print(f"{stage:<26}{got['peak'] / GIB:>14.2f}{plan[stage].peak / GIB:>10.2f}{ratio:>15.2f}"
              + (f"{row['measured_default_malloc']['peak'] / GIB:>20.2f}" if args.both else ""), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        recipe = Path(args.recipe).resolve()
        recipe = recipe.relative_to(ROOT) if recipe.is_relative_to(ROOT) else Path(recipe.name)
        args.out.write_text(json.dumps({"command": "python " + " ".join(sys.argv), "recipe": str(recipe),
                                        "quick": args.quick,
                                        "allocator": allocator,
                                        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4"),
                                        "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
