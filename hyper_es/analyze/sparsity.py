"""`hyper-es analyze sparsity RUN`: is a row's useful change sparse?

For each row (the GRPO-LoRA baseline, Hyper-ES, ES; any direction or snapshot by name), its final update ΔW over
the tensors it touches is cut to the top p of entries by magnitude (one threshold over all of them) for each
fraction p, and each cut update is scored greedy on the test sets by one resident engine (the cut updates are
the directions of one DirectionSet, installed one at a time at coefficient 1, as the final evaluation does). The
curve is the accuracy kept at each p, next to the full update (p = 1) and the base (p = 0), with per-layer update
norms. Every cut keeps its per-problem greedy correctness, so each cut is compared with the full update and with
the base by a paired bootstrap CI (pooled over the tasks). Writes sparsity.json (after each row: a re-run skips
the rows it holds for the same fractions and limit) and PNGs to --out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hyper_es.rows import row_update


def top_fraction(delta: dict[str, torch.Tensor], p: float) -> dict[str, torch.Tensor]:
    """Keep the largest-magnitude fraction p of all entries (one threshold over every tensor); zero the rest."""
    if p >= 1:
        return delta
    mags = torch.cat([d.abs().flatten() for d in delta.values()])
    keep = max(int(round(p * mags.numel())), 1)
    threshold = torch.topk(mags, keep, sorted=False).values.min() if keep < mags.numel() else 0.0
    return {t: torch.where(d.abs() >= threshold, d, torch.zeros_like(d)) for t, d in delta.items()}


def layer_norms(delta: dict[str, torch.Tensor], arch) -> dict[str, float]:
    out: dict[str, float] = {}
    for t, d in delta.items():
        i = arch.layer_index(t)
        key = "other" if i is None else str(i)
        out[key] = out.get(key, 0.0) + float(d.double().pow(2).sum())
    order = sorted(out, key=lambda k: (k == "other", int(k) if k != "other" else 0))
    return {k: out[k] ** 0.5 for k in order}


def paired_cuts(acc: dict, tasks: list[str]) -> dict:
    """Each cut minus the full update and minus the base: paired bootstrap over the same problems, pooled."""
    from hyper_es.evaluate import stats

    def diff(a: str, b: str) -> dict:
        return stats.paired_bootstrap([(acc[a]["correct"][t], acc[b]["correct"][t]) for t in tasks]).to_dict()

    return {k: {"vs_full": diff(k, "p=1"), "vs_base": diff(k, "p=0")} for k in acc if k not in ("p=0", "p=1")}


def sparsity(recipe, run_dir: Path, rows: list[str], fractions: list[float], *, backend: str, limit: int | None,
             workdir: Path, done: dict | None = None, save=None) -> dict:
    from hyper_es import architectures
    from hyper_es.directions import DirectionSet
    from hyper_es.engine import inplace_engine
    from hyper_es.evaluate.runner import evaluate_task
    from hyper_es.merging import MergeSettings, global_weights
    from hyper_es.report import trained_tasks
    from hyper_es.tasks import Task

    run_set = DirectionSet.from_run(run_dir)  # read once: its base and architecture
    base, arch = run_set.base, architectures.for_model(run_set.base_path)
    names = [t.name for t in recipe.tasks if t.test is not None]
    tasks = [Task(recipe.task(n), recipe.base_dir) for n in trained_tasks(recipe, names) or names]
    fractions = sorted({float(p) for p in fractions} | {1.0}, reverse=True)
    result = {"fractions": fractions, "tasks": [t.name for t in tasks], "limit": limit, "rows": {}}
    if done and all(done.get(k) == result[k] for k in ("fractions", "tasks", "limit")):  # resume: rows measured
        result["rows"] = {r: v for r, v in done.get("rows", {}).items() if r in rows and "paired" in v}
    base_acc = next((v["accuracy"]["p=0"] for v in result["rows"].values()), None)  # the base, scored once
    for row in rows:
        if row in result["rows"]:
            continue
        delta = row_update(run_dir, row, recipe)
        cut = {f"p={p:g}": top_fraction(delta, p) for p in fractions}
        ds = DirectionSet.from_dicts(base, cut)
        genome, _ = global_weights(ds, dict.fromkeys(ds.names, 0.0))
        engine, tok = inplace_engine(recipe, backend, ds, genome, MergeSettings(method="task_arithmetic"),
                                     workdir / row, seed=recipe.eval.seed)
        acc = {}
        try:
            for key in [None, *cut]:  # None: the base (p = 0)
                if key is None and base_acc is not None:
                    acc["p=0"] = base_acc
                    continue
                engine.set_genome(global_weights(ds, {n: float(n == key) for n in ds.names})[1])
                scored = {t.name: evaluate_task(engine, tok, t, limit=limit) for t in tasks}
                per = {t: r.pass_at[1] for t, r in scored.items()}
                acc["p=0" if key is None else key] = {
                    "tasks": per, "mean": float(np.mean(list(per.values()))),
                    "ids": {t: [x["id"] for x in r.records] for t, r in scored.items()},
                    "correct": {t: [int(x["scores"][0] >= 1.0) for x in r.records] for t, r in scored.items()}}
        finally:
            engine.close()
        base_acc = acc["p=0"]
        full, zero = acc["p=1"]["mean"], acc["p=0"]["mean"]
        gain = full - zero
        result["rows"][row] = {
            "accuracy": acc, "entries": int(sum(d.numel() for d in delta.values())),
            "gain_kept": {k: (v["mean"] - zero) / gain if gain else None for k, v in acc.items()},
            "layer_norms": layer_norms(delta, arch), "paired": paired_cuts(acc, result["tasks"])}
        if save is not None:
            save(result)
    return result


def plot(result: dict, out: Path) -> list[Path]:
    from hyper_es.analyze.figures import save, subplots

    fig, (a, b) = subplots(1, 2, figsize=(10, 3.8))
    for row, r in result["rows"].items():
        ps = [p for p in result["fractions"]]
        a.plot(ps, [r["accuracy"][f"p={p:g}"]["mean"] for p in ps], "o-", label=row)
        a.axhline(r["accuracy"]["p=0"]["mean"], color="grey", lw=0.8, ls=":")
        layers = [k for k in r["layer_norms"] if k != "other"]
        b.plot([int(k) for k in layers], [r["layer_norms"][k] for k in layers], "o-", ms=3, label=row)
    a.set(xscale="log", xlabel="fraction of ΔW entries kept (top by magnitude)", ylabel="test accuracy (greedy)",
          title="accuracy kept (dotted: the base)")
    b.set(xlabel="layer", ylabel="‖ΔW‖ (Frobenius)", title="per-layer update norm", yscale="log")
    a.legend(fontsize=7)
    return [save(fig, out / "sparsity.png")]


def analyze_sparsity(recipe, run_dir: Path, rows: list[str], fractions: list[float], out: Path, *,
                     backend: str, limit: int | None) -> dict:
    from hyper_es.io import read_json, write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    path = out / "sparsity.json"
    done = read_json(path, "delete it to measure again") if path.is_file() else None
    result = sparsity(recipe, Path(run_dir), rows, fractions, backend=backend, limit=limit, workdir=out / "engine",
                      done=done, save=lambda r: write_json_atomic(path, r))
    write_json_atomic(path, result)
    result["figures"] = [str(p) for p in plot(result, out)]
    return result
