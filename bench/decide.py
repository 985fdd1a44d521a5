"""The decision experiment: Hyper-ES against a fair GRPO-LoRA baseline, paired, over several seeds.

    python bench/decide.py --root ROOT/decide                      # lr choice (seed 0), then seeds 0 and 1
    python bench/decide.py --root ROOT/decide --summary-only       # re-write the summary from what is done

1. The baseline's learning rate is chosen on validation from `--lrs` (seed `--lr-seed`): each lr trains the
   baseline run (with its snapshots; with `directions_from: snapshots` the directions are its increments), and
   its best adapter by validation (snapshots and final, greedy on the search's validation rows) scores the lr.
2. For each seed (gradient.seed = search.seed = seed), `hyper-es run` at the chosen lr. The report pairs every row
   with the baseline's final adapter and with its best adapter by validation.
3. Each seed's artefacts (no weights) are copied to `--results/seed<N>/`; `summary.json`/`summary.md` give, per
   seed and pooled over seeds (problems resampled within each seed × task), Hyper-ES − the better of the two
   baseline rows with paired bootstrap 95% CIs, the step ratio, GSM8K, and whether the goal is reached.
4. `--ablate NAME…` (seed `--lr-seed`, the chosen lr): the search again with one setting changed (`ABLATIONS`),
   on the same directions unless the change is in the gradient stage; measured on the validation guard's rows
   (search/result.json), written to `--results/ablation/<name>/` and `ablation.md`.
Every stage resumes from its run folder (`--root`), so the experiment can span sessions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hyper_es.evaluate import stats  # noqa: E402
from hyper_es.evaluate.final import row_values  # noqa: E402
from hyper_es.io import read_json, write_json_atomic  # noqa: E402
from baseline_grid import variant  # noqa: E402  (bench/ is the script's folder)

logger = logging.getLogger("decide")
COPY = ["recipe.yaml", "report.json", "report.md", "geometry.json", "search/generations.jsonl",
        "search/result.json", "search/best.json", "search/scale_scan.json", "search/checkpoint.json"]


PASS_K = ("pass@1", "pass@8")
ABLATIONS = {  # name -> recipe overrides (section.field); each changes one thing of the main recipe
    "bf16": {"eval.dtype": "bfloat16"},
    "dare_ties": {"merge.method": "dare_ties", "merge.density": 0.5},
    "per_generation": {"search.fitness_set": "per_generation"},
    "jobs": {"gradient.directions_from": "jobs", "gradient.lora_seed": 0},  # 4 independent 6-step jobs, shared A
}


def choose_lr(args) -> dict:
    from hyper_es.directions.collect import collect
    from hyper_es.evaluate.final import evaluate_run

    out = args.root / "lr_selection.json"
    scores = {}
    for lr in args.lrs:
        recipe = variant(args.recipe, lr=lr, seed=args.lr_seed, pass_k_limit=args.pass_k_limit)
        run_dir = args.root / f"seed{args.lr_seed}-lr{lr:g}"
        collect(recipe, run_dir, baseline=True)
        vals = evaluate_run(recipe, run_dir, test=False)
        best = max(vals, key=lambda r: (r["val"]["mean"], -(r["steps"] or 0)))
        scores[f"{lr:g}"] = {"best": best["name"], "val": best["val"]["mean"],
                             "adapters": {r["name"]: r["val"]["mean"] for r in vals}}
        logger.info("lr %g: best %s, validation %.3f", lr, best["name"], best["val"]["mean"])
    chosen = max(scores, key=lambda k: (scores[k]["val"], -float(k)))  # ties: the smaller lr
    result = {"seed": args.lr_seed, "chosen": float(chosen), "lrs": scores,
              "criterion": "the baseline's best adapter (snapshots and final) by greedy validation accuracy"}
    write_json_atomic(out, result)
    return result


def run_seed(args, lr: float, seed: int) -> Path:
    from hyper_es.pipeline import run

    run_dir = args.root / f"seed{seed}-lr{lr:g}"
    run(variant(args.recipe, lr=lr, seed=seed, pass_k_limit=args.pass_k_limit), run_dir)
    dest = args.results / f"seed{seed}"
    for rel in COPY + [str(p.relative_to(run_dir)) for p in sorted(run_dir.glob("eval/**/*.json"))
                       if "engine" not in p.parts] + [str(p.relative_to(run_dir))
                                                      for p in sorted(run_dir.glob("directions/*/manifest.json"))]:
        if (run_dir / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run_dir / rel, dest / rel)
    return dest


def ablate(args, lr: float, name: str) -> dict:
    """The search with one setting changed, on seed `--lr-seed`; the directions are the main run's (hard links)
    unless the change is in the gradient stage."""
    from hyper_es.directions.collect import collect
    from hyper_es.search.run import search

    overrides = ABLATIONS[name]
    recipe = variant(args.recipe, lr=lr, seed=args.lr_seed, pass_k_limit=args.pass_k_limit, overrides=overrides)
    run_dir = args.root / f"ablate-{name}-seed{args.lr_seed}"
    if any(k.startswith("gradient.") for k in overrides):
        collect(recipe, run_dir)
    elif not (run_dir / "directions").is_dir():
        main = args.root / f"seed{args.lr_seed}-lr{lr:g}" / "directions"
        shutil.copytree(main.resolve(), run_dir / "directions", copy_function=os.link)
    if not (run_dir / "search" / "result.json").is_file():
        search(recipe, run_dir, score_test=False)
    dest = args.results / "ablation" / name
    dest.mkdir(parents=True, exist_ok=True)
    for rel in ("search/result.json", "search/generations.jsonl", "search/scale_scan.json", "geometry.json"):
        if (run_dir / rel).is_file():
            shutil.copy2(run_dir / rel, dest / Path(rel).name)
    write_json_atomic(dest / "overrides.json", overrides)
    return read_json(run_dir / "search" / "result.json", "")


def ablation_markdown(results: Path, seed: int) -> str:
    """One line per search: the main run's and each ablation's, on the validation guard's rows."""
    lines = [f"# Ablations (seed {seed}): validation accuracy (greedy, the guard's rows), one change each", "",
             "| search | overrides | base | x0 | searched | kept | better/worse rows | hyper-es | search s |",
             "|---|---|---|---|---|---|---|---|---|"]
    entries = [("main", {}, results / f"seed{seed}" / "search" / "result.json")]
    entries += [(n, ABLATIONS[n], results / "ablation" / n / "result.json") for n in ABLATIONS]
    for name, over, path in entries:
        if not path.is_file():
            continue
        r = read_json(path, "")
        g = r.get("guard") or {}
        lines.append(f"| {name} | {', '.join(f'{k}={v}' for k, v in over.items()) or 'the recipe'} | "
                     f"{r['rows']['base']['val']:.3f} | {g.get('x0_val', 0):.3f} | {g.get('best_val', 0):.3f} | {g.get('kept')} | "
                     f"{g.get('better_rows')}/{g.get('worse_rows')} | {r['rows']['hyper-es']['val']:.3f} | "
                     f"{r['search_seconds']:.0f} |")
    lines += ["", "base: the base model in that search's engine (bf16 rounds the base too). search s: wall time, "
              "shared with other jobs for some runs, so not comparable across rows."]
    return "\n".join(lines) + "\n"


def summarize(results: Path, seeds: list[int]) -> dict:
    """Per seed and pooled over seeds: Hyper-ES minus each baseline row (final; best by validation), paired."""
    per, strata = {}, {"trained": {}, "gsm8k": {}}
    for seed in seeds:
        folder = results / f"seed{seed}"
        if not (folder / "report.json").is_file():
            continue
        report = read_json(folder / "report.json", "re-run the seed")
        rows = {r["name"]: r for r in report["rows"]}
        trained = report["paired"]["pooled"].get("trained", [])
        best = (report.get("baseline_best") or {}).get("name", "baseline")
        entry = {"baseline_best": best, "steps": {n: rows[n]["optimizer_steps"] for n in ("hyper-es", "baseline")},
                 "rows": [rows[n] for n in dict.fromkeys(("base", "uniform", best, "baseline", "hyper-es")) if n in rows],
                 "vs": {}}
        for label in ("baseline", "baseline-best"):
            d = report["paired"]["vs"].get(label, {}).get("hyper-es")
            if d:
                entry["vs"][label] = {"trained": d["pooled"]["trained"], **{t: d["tasks"][t] for t in d["tasks"]}}
        for label, ref in (("baseline", "baseline"), ("baseline-best", best)):
            for group, tasks in (("trained", trained), ("gsm8k", [t for t in report["tasks"] if t == "gsm8k"])):
                for t in tasks:
                    a_ids, a = row_values(folder, "hyper-es", t)
                    b_ids, b = row_values(folder, ref, t)
                    strata[group].setdefault(label, []).append(stats.align(a_ids, a, b_ids, b, what=f"seed {seed} {t}"))
        for m in PASS_K:  # sampled rows only: Hyper-ES and the final baseline, on the sampled prefix
            st = [stats.align(*row_values(folder, "hyper-es", t, m), *row_values(folder, "baseline", t, m),
                              what=f"seed {seed} {t} {m}") for t in trained]
            entry["vs"].setdefault("baseline", {})[m] = stats.paired_bootstrap(st).to_dict()
            strata.setdefault(m, {}).setdefault("baseline", []).extend(st)
        per[seed] = entry
    pooled = {g: {label: stats.paired_bootstrap(s).to_dict() for label, s in by.items()} for g, by in strata.items()}
    goal = {}
    for label in ("baseline", "baseline-best"):
        t, g = pooled["trained"].get(label), pooled["gsm8k"].get(label)
        ratio = max(e["steps"]["hyper-es"] / e["steps"]["baseline"] for e in per.values()) if per else None
        goal[label] = None if t is None else {
            "diff_points": round(100 * t["diff"], 2), "ci_low_above_0": t["low"] > 0, "at_least_1_point": t["diff"] >= 0.01,
            "steps_ratio_max": ratio, "gsm8k_no_loss_beyond_ci": g is None or g["high"] >= 0,
            "reached": t["diff"] >= 0.01 and t["low"] > 0 and ratio <= 0.9 and (g is None or g["high"] >= 0)}
    return {"seeds": per, "pooled_over_seeds": pooled, "goal": goal,
            "pooling": "mean over seed × task strata, equal weights; problems resampled within each stratum",
            "B": stats.B_DEFAULT, "seed": stats.SEED_DEFAULT}


def summary_markdown(summary: dict, lr: dict | None) -> str:
    def fmt(d):
        return "—" if d is None else f"{100 * d['diff']:+.1f} [{100 * d['low']:.1f}, {100 * d['high']:.1f}]"

    lines = ["# Decision experiment: Hyper-ES − GRPO-LoRA, greedy, points, paired bootstrap 95% CI", ""]
    if lr:
        lines += [f"Baseline lr chosen on validation (seed {lr['seed']}): {lr['chosen']:g} — " + ", ".join(
            f"{k}: {v['val']:.3f} ({v['best']})" for k, v in lr["lrs"].items()), ""]
    lines += ["Greedy test accuracy (1,000 problems per trained task, GSM8K-100) and cost, from each seed's report.json:", "",
              "| seed | row | steps | train tokens | search tokens | chain_sum | add_sub | gsm8k |",
              "|---|---|---|---|---|---|---|---|"]
    for seed, e in summary["seeds"].items():
        for r in e["rows"]:
            res = r["results"]
            lines.append(f"| {seed} | {r['name']} | {r['optimizer_steps']} | {'—' if r['train_tokens'] is None else r['train_tokens']} | "
                         f"{r['search_tokens'] or 0} | " + " | ".join(
                             f"{res[t]['greedy']:.3f}" if t in res else "—" for t in ("chain_sum", "add_sub", "gsm8k"))
                         + " |")
    lines += ["", "Hyper-ES minus each baseline row, greedy, points, paired bootstrap 95% CI:", "",
              "| seed | baseline row | steps H-ES/baseline | trained tasks (pooled) | gsm8k |", "|---|---|---|---|---|"]
    for seed, e in summary["seeds"].items():
        for label in ("baseline", "baseline-best"):
            d = e["vs"].get(label, {})
            name = e["baseline_best"] if label == "baseline-best" else "baseline"
            lines.append(f"| {seed} | {label} ({name}) | {e['steps']['hyper-es']}/{e['steps']['baseline']} | "
                         f"{fmt(d.get('trained'))} | {fmt(d.get('gsm8k'))} |")
    for label in ("baseline", "baseline-best"):
        lines.append(f"| all | {label} | | {fmt(summary['pooled_over_seeds']['trained'].get(label))} | "
                     f"{fmt(summary['pooled_over_seeds']['gsm8k'].get(label))} |")
    lines += ["", "Pass@k (n = 8 at T = 1, the first 200 test problems of each trained task), Hyper-ES minus the final "
              "baseline, pooled over the trained tasks, points, paired:", "", "| seed | pass@1 | pass@8 |", "|---|---|---|"]
    for seed, e in summary["seeds"].items():
        lines.append(f"| {seed} | " + " | ".join(fmt(e["vs"].get("baseline", {}).get(m)) for m in PASS_K) + " |")
    lines.append("| all | " + " | ".join(fmt(summary["pooled_over_seeds"].get(m, {}).get("baseline")) for m in PASS_K)
                 + " |")
    lines += ["", "Goal (≥ +1 point pooled, CI above 0, ≤ 90% of the baseline's steps, no GSM8K loss beyond its CI):"]
    lines += [f"- vs {k}: {'reached' if g and g['reached'] else 'not reached'} ({json.dumps(g)})"
              for k, g in summary["goal"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes/smollm2-135m.yaml")
    p.add_argument("--root", type=Path, required=True, help="run folders (resumable; keep outside the repo)")
    p.add_argument("--results", type=Path, default=ROOT / "bench/results/decide")
    p.add_argument("--lrs", type=float, nargs="+", default=[2.5e-4, 5e-4, 1e-3])
    p.add_argument("--lr-seed", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1], help="none: only the ablations (another process)")
    p.add_argument("--pass-k-limit", type=int, default=200)
    p.add_argument("--ablate", nargs="*", default=[], choices=list(ABLATIONS))
    p.add_argument("--summary-only", action="store_true")
    args = p.parse_args()
    from hyper_es.progress import setup_logging

    setup_logging()
    args.root.mkdir(parents=True, exist_ok=True)
    args.results.mkdir(parents=True, exist_ok=True)
    lr = read_json(args.root / "lr_selection.json", "") if (args.root / "lr_selection.json").is_file() else None
    if not args.summary_only:
        lr = lr or choose_lr(args)
        write_json_atomic(args.results / "lr_selection.json", lr)
        for seed in args.seeds:
            run_seed(args, lr["chosen"], seed)
            write_summary(args, lr)
        for name in args.ablate:
            ablate(args, lr["chosen"], name)
            (args.results / "ablation.md").write_text(ablation_markdown(args.results, args.lr_seed))
    if args.seeds:
        write_summary(args, lr)
    if (args.results / "ablation").is_dir():
        (args.results / "ablation.md").write_text(ablation_markdown(args.results, args.lr_seed))
    print(f"command: python {' '.join(sys.argv)}")


def write_summary(args, lr: dict | None) -> None:
    summary = summarize(args.results, args.seeds)
    write_json_atomic(args.results / "summary.json", summary)
    (args.results / "summary.md").write_text(summary_markdown(summary, lr))
    print(summary_markdown(summary, lr))


if __name__ == "__main__":
    main()
