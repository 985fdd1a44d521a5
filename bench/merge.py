"""Merge speed and memory, side by side in one run, on a base model with K real directions.

    python bench/merge.py --run runs/smollm2 [--density 0.5] [--repeats 3]

(a) mergekit 0.1.5 `merge_state_dicts` dare_ties on the K fine-tuned state dicts (base + ΔW_k, built beforehand);
(b) hx.merge from scratch (LoRA factors → ΔW, masks, TIES) tensor by tensor;
(c) MergePlan.apply per new coefficient vector, with the sparsified deltas prepared once (the search's hot path).
Each variant runs in its own child process (peak RSS is per variant). Same global weights for all three.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(kind: str, run: str, density: float, repeats: int) -> dict:
    import numpy as np
    import torch
    from safetensors.torch import load_file

    import hyper_es as hx
    from hyper_es.merging import MergePlan, MergeSettings, genome_for

    torch.set_num_threads(1)
    ds = hx.DirectionSet.from_run(run)
    base = load_file(str(ds.base_path / "model.safetensors"))
    weights = {n: 1.0 / len(ds) for n in ds.names}
    times, setup = [], 0.0
    if kind == "mergekit":
        from mergekit.merge_methods import merge_state_dicts

        models = {"base": base}
        for k, n in enumerate(ds.names):
            models[n] = {t: (v + ds.delta(k, t)) if t in ds.tensor_names() else v for t, v in base.items()}
        for _ in range(repeats):
            t0 = time.perf_counter()
            merge_state_dicts(models, "dare_ties", base="base", dtype=torch.float32,
                              parameters={"weight": weights, "density": density, "normalize": False})
            times.append(time.perf_counter() - t0)
    elif kind == "scratch":
        for _ in range(repeats):
            t0 = time.perf_counter()
            hx.merge(base, ds, weights, density=density)
            times.append(time.perf_counter() - t0)
    else:
        genome = genome_for(ds)
        t0 = time.perf_counter()
        plan = MergePlan(ds, genome, MergeSettings(density=density))
        setup = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        for _ in range(repeats):
            x = rng.uniform(-0.5, 1.0, genome.size)
            t0 = time.perf_counter()
            plan.apply(base, x)
            times.append(time.perf_counter() - t0)
    return {"seconds": sorted(times)[len(times) // 2], "setup_s": setup,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "directions": len(ds), "tensors": len(ds.tensor_names())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="run directory with finished directions")
    ap.add_argument("--density", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "merge.json")
    ap.add_argument("--child", choices=["mergekit", "scratch", "plan"])
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.run, args.density, args.repeats)))
        return
    res = {}
    for kind in ("mergekit", "scratch", "plan"):
        cmd = [sys.executable, __file__, "--child", kind, "--run", args.run, "--density", str(args.density),
               "--repeats", str(args.repeats)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
        res[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
    command = "python bench/merge.py " + " ".join(sys.argv[1:])
    r = res["mergekit"]
    print(f"\n{command}\nK={r['directions']} directions, {r['tensors']} tensors, density {args.density}, "
          f"median of {args.repeats}\n")
    print(f"{'variant':<34}{'s/merge':>10}{'vs (a)':>10}{'setup s':>10}{'peak RSS MB':>14}")
    labels = {"mergekit": "(a) mergekit merge_state_dicts", "scratch": "(b) hx.merge from scratch",
              "plan": "(c) MergePlan.apply (prepared)"}
    for kind, label in labels.items():
        s = res[kind]
        print(f"{label:<34}{s['seconds']:>10.3f}{r['seconds'] / s['seconds']:>9.1f}x{s['setup_s']:>10.2f}"
              f"{s['peak_rss_mb']:>14.0f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"command": command, "density": args.density, "results": res}, indent=1))


if __name__ == "__main__":
    main()
