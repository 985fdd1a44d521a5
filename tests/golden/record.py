"""Record a tiny search and a tiny ES run (HF engine) as golden values: `python tests/golden/record.py OUT`.

Run once with the code before the engine/fitness/loop refactor (df77084); the values in `golden.json` and the
half-finished run folder in `old_run/` came from that code, and `tests/test_golden.py` checks today's code
against them. Re-record only on purpose (a deliberate change of results), and say so in the commit."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "helpers"))

SEARCH_KEYS = ("generation", "evals", "best", "mean", "median", "best_x", "sigma", "val", "tokens")
ES_KEYS = ("iteration", "seeds", "signs", "rewards", "z", "sigma", "alpha", "tokens", "mean", "best", "diversity")


def recipe(folder: Path, **executor):
    """The tiny dense recipe: 2 one-step directions, a 3-generation search, a 3-iteration ES run; no guard, so the
    searched genome and θ_T are what the run keeps (the exact reward is 0 on validation for a random model)."""
    from recipes import VAL, tiny_recipe

    return tiny_recipe(folder, {  # the splits as recorded (before splits were partitioned by question)
        "gradient": {"directions": 2, "steps": 1}, "tasks.0.val": {**VAL, "partition": "none"},
        "merge": {"layer_group_size": 2},
        "search": {"popsize": 4, "max_generations": 3, "sigma0": 0.5, "scale_scan": None, "x0": "uniform"},
        "fitness": {"minibatch": 4, "val_size": 8, "rescore_top": 1, "reward": "dense_reward:length_fraction",
                    "fitness_set": "fixed", "guard": False},
        "es": {"population": 4, "iterations": 3, "sigma": 0.05, "alpha": 0.01},
        **({"executor": {"kind": "ray", **executor}} if executor else {})}, base="dense", write=True)


def digest(tensors: dict) -> str:
    """sha256 over the tensors' names and fp32 bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def stats(tensors: dict) -> dict:
    """The update's sum, L1 and L2 norms (fp64): compared within rounding where another CPU's digest differs."""
    import torch

    flat = torch.cat([tensors[n].detach().double().flatten() for n in sorted(tensors)])
    return {"sum": flat.sum().item(), "l1": flat.abs().sum().item(), "l2": flat.norm().item()}


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def observed_es(recipe_obj, run: Path, row_update) -> dict:
    """`observed`'s ES half (an ES run alone: es.start is the base)."""
    es, es_result = lines(run / "es" / "history.jsonl"), json.loads((run / "es" / "result.json").read_text())
    return {"es": [{k: h[k] for k in ES_KEYS} for h in es],
            "es_result": {**{k: es_result[k] for k in ("iterations", "kept_iterations", "guard", "val")},
                          "tokens": es_result["cost"]["phases"]["iterations"]["search_tokens"]},  # fitness tokens
            "es_update": digest(es_delta := row_update(run, "es", recipe_obj)), "es_update_stats": stats(es_delta)}


def observed(recipe_obj, run: Path, row_update) -> dict:
    """What the golden test compares: the logs' fields, the result rows, and digests of the final updates
    (`row_update(run_dir, row, recipe)`: a row's ΔW, wherever today's code keeps it)."""
    search = lines(run / "search" / "generations.jsonl")
    result = json.loads((run / "search" / "result.json").read_text())
    return {"search": [{k: g[k] for k in SEARCH_KEYS} for g in search],
            "rows": result["rows"], "guard": result["guard"],
            "best": json.loads((run / "search" / "best.json").read_text()),
            **observed_es(recipe_obj, run, row_update),
            "search_update": digest(search := row_update(run, "hyper-es", recipe_obj)),
            "search_update_stats": stats(search)}


def close(got, want) -> bool:
    """Equal, floats within 1e-9 relative: pycma's linear algebra rounds differently on another CPU."""
    if isinstance(want, float) and isinstance(got, (int, float)):
        return abs(got - want) <= max(1e-9 * abs(want), 1e-12)
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(close(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(close, got, want))
    return got == want


def close_stats(got: dict, want: dict) -> bool:
    """An update's sum, L1 and L2 norms equal within float32 rounding (1e-6 of the L1 norm, which bounds every
    entry's share: the sum cancels, so it is compared on the norm's scale): torch's float32 kernels round
    differently on another CPU's vector units."""
    scale = want["l1"]
    return got.keys() == want.keys() and all(abs(got[k] - want[k]) <= 1e-6 * scale for k in want)


def check(got: dict, want: dict) -> None:
    """`got` (from `observed`) matches the recorded values; the updates bitwise, or (where this CPU rounds
    differently) by their norms."""
    for key in want:
        if key.endswith("_update"):
            assert got[key] == want[key] or close_stats(got[f"{key}_stats"], want[f"{key}_stats"]), key
        elif not key.endswith("_update_stats"):
            assert close(got[key], want[key]), key


def main(out: Path) -> None:
    from hyper_es.directions.collect import collect
    from hyper_es.search.es_run import run_es
    from hyper_es.search.run import search

    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    r = recipe(work)
    run = work / "run"
    collect(r, run)
    # The half-finished folder: directions, one search generation, one ES iteration (what a kill leaves).
    partial = work / "partial"
    partial.mkdir()
    rp = recipe(partial)
    shutil.copytree(run / "directions", partial / "run" / "directions")
    shutil.copy(run / "recipe.yaml", partial / "run" / "recipe.yaml")
    data = rp.model_dump(mode="json")
    data["search"]["max_generations"] = 1  # the checkpoint does not record the budget: a resume goes on
    import hyper_es as hx

    short = hx.recipe.recipe_from_dict(data, partial / "recipe.yaml")
    search(short, partial / "run", backend="hf")
    run_es(rp, partial / "run", backend="hf")
    hist = partial / "run" / "es" / "history.jsonl"
    hist.write_text(hist.read_text().splitlines()[0] + "\n")  # ES killed after its first iteration
    for f in ("search/result.json", "search/best.json", "es/result.json", "es/final.json"):
        (partial / "run" / f).unlink()  # as if killed before the stage finished
    search(r, run, backend="hf")
    run_es(r, run, backend="hf")
    from hyper_es.rows import row_update

    golden = observed(r, run, row_update)
    (out / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    old = out / "old_run"
    shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(partial / "run", old, ignore=shutil.ignore_patterns("engine", "tensorboard", ".work-*"))
    shutil.rmtree(work)
    print(json.dumps({k: v for k, v in golden.items() if k.endswith("update")}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
