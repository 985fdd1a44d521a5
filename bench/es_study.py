"""Full-parameter ES beside GRPO-LoRA and Hyper-ES on SmolLM2-135M, at an equal budget of generated tokens.

    python bench/es_study.py --root ROOT/es --source ROOT/decide/seed0-lr0.00025
    python bench/es_study.py --root ROOT/es-seed1 --source ROOT/decide/seed1-lr0.00025 --es-seed 1 \
        --results bench/results/es-seed1 --arms es          # the second seed: ES against that seed's rows
    python bench/es_study.py --across-seeds ROOT/es:ROOT/decide/seed0-lr0.00025 \
        ROOT/es-seed1:ROOT/decide/seed1-lr0.00025      # ES pooled over both seeds

`--source` is a finished `hyper-es run` folder of the decision experiment (bench/decide.py): its directions,
baseline, search and evaluated rows are shared by every arm (hard links and copies), so the arms are paired on the
same test problems and only the ES rows are new. The budget is the Hyper-ES row's generated tokens (training +
search). Arms, each a run folder under `--root`, resumable by stage:
- `es`: ES from the base, its fitness tokens capped at the budget (`es.max_tokens`);
- `grpo-es`: ES from the GRPO-LoRA baseline (`es.start: baseline`), capped at the budget minus the baseline's
  training tokens;
- `es-grpo`: ES → GRPO-LoRA (`es.then: grpo`): the `es` arm's ES (its files copied), then a GRPO-LoRA job with
  the baseline's settings on the weights ES kept;
- `hyperes-es`: Hyper-ES → ES (`es.start: hyper-es`), refinement with as many ES tokens as `grpo-es` had;
- short runs from the base (validation only, paired against the start): z-score (the default), no normalisation,
  and z-score with antithetic pairs.
ES settings are those of the ES-at-scale study (σ 1e-3, a step of 5e-4 on (1/N)·Σ zᵢεᵢ, which is α = 5e-7 in
this toolkit's α/(Nσ) form), population 16 (8 in the short runs), all linear weights in the layers. Writes
`--results/summary.json`, `summary.md`, the arms' reports and ES histories, and the coverage figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hyper_es.evaluate import stats  # noqa: E402
from hyper_es.evaluate.final import row_values  # noqa: E402
from hyper_es.io import read_json, write_json_atomic  # noqa: E402
from hyper_es.recipe import load_run_recipe, recipe_from_dict  # noqa: E402

ES = {"scope": "all_linear", "population": 16, "sigma": 1e-3, "alpha": 5e-7, "iterations": 100,
      "normalise": "zscore", "antithetic": False, "seed": 0, "noise": "generator"}  # the arms' runs predate the table
SHORT = {"zscore": {}, "none": {"normalise": "none"}, "antithetic": {"antithetic": True}}
SHORT_RUN = {"population": 8, "iterations": 3}
ARMS = {"es": "es", "baseline+es": "grpo-es", "es+grpo": "es-grpo", "hyper-es+es": "hyperes-es"}  # row: arm
START = {"es": "base", "baseline+es": "baseline", "es+grpo": "es", "hyper-es+es": "hyper-es"}  # row: its start
SHARED = ["search", "eval", "geometry.json", "recipe.yaml"]


def arm_recipe(source: Path, **es):
    data = load_run_recipe(source).model_dump(mode="json")
    data["es"].update({**ES, **es})
    return recipe_from_dict(data, ROOT / "recipes" / "smollm2-135m.yaml")


def arm_folder(root: Path, source: Path, name: str) -> Path:
    """A run folder sharing the source's directions (hard links) and finished search and evaluation (copies)."""
    run = root / name
    if not (run / "directions").is_dir():
        shutil.copytree(source.resolve() / "directions", run / "directions", copy_function=os.link)
    for rel in SHARED:
        src, dst = source / rel, run / rel
        if src.is_dir() and not dst.exists():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("engine", "tensorboard"))
        elif src.is_file() and not dst.exists():
            shutil.copy2(src, dst)
    return run


def budget(source: Path) -> dict:
    rows = {r["name"]: r for r in read_json(source / "report.json", "finish the source run")["rows"]}
    h, b = rows["hyper-es"], rows["baseline"]
    total = h["train_tokens"] + h["search_tokens"]
    return {"tokens": total, "hyper-es": total, "baseline": b["train_tokens"], "es": total,
            "grpo-es": total - b["train_tokens"], "hyperes-es": total - b["train_tokens"]}


def run_arms(args) -> dict:
    from hyper_es.search.es_run import run_es
    from hyper_es.evaluate.final import evaluate_run
    from hyper_es.report import run_report, write_report

    cap = budget(args.source)
    for name, start in (("es", "base"), ("grpo-es", "baseline"), ("es-grpo", "base"), ("hyperes-es", "hyper-es")):
        if args.arms and name not in args.arms:
            continue
        run = arm_folder(args.root, args.source, name)
        recipe = arm_recipe(args.source, start=start, max_tokens=cap.get(name, cap["es"]), seed=args.es_seed,
                            then="grpo" if name == "es-grpo" else "none")
        if name == "es-grpo":  # the `es` arm's ES, shared
            share_es(args.root / "es", run)
        run_es(recipe, run)
        report = run_report(recipe, run, evaluate_run(recipe, run))
        write_report(run, report)
        copy_out(run, args.results / name)
    for name, change in SHORT.items():
        if args.arms and f"short-{name}" not in args.arms:
            continue
        run = args.root / f"short-{name}"
        recipe = arm_recipe(args.source, **SHORT_RUN, **change, seed=args.es_seed)
        run_es(recipe, run)
        copy_out(run, args.results / f"short-{name}")
    return cap


def share_es(src: Path, run: Path) -> None:
    (run / "es").mkdir(exist_ok=True)
    for rel in ("es/config.json", "es/history.jsonl", "es/start.json", "es/final.json", "es/result.json",
                "eval/es.json"):
        if not (run / rel).exists():
            shutil.copy2(src / rel, run / rel)


def copy_out(run: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for rel in ("report.json", "report.md", "es/config.json", "es/history.jsonl", "es/result.json",
                "es/start.json", "es/final.json"):
        if (run / rel).is_file():
            shutil.copy2(run / rel, dest / Path(rel).name)
    for row in ("es", "baseline+es", "es+grpo", "hyper-es+es"):
        if (run / "eval" / f"{row}.json").is_file():
            shutil.copy2(run / "eval" / f"{row}.json", dest / f"eval-{row}.json")


def paired(runs: dict, row: str, ref: str, tasks: list[str], metric: str) -> dict:
    strata = [stats.align(*row_values(runs[row], row, t, metric), *row_values(runs[ref], ref, t, metric),
                          what=f"{row} vs {ref} {t} {metric}") for t in tasks]
    return stats.paired_bootstrap(strata).to_dict()


def summarize(args, cap: dict) -> dict:
    """Side by side: greedy, Pass@1, Pass@8 and tokens per row; each row minus the baseline's best adapter by
    validation and minus Hyper-ES, paired, pooled over the trained tasks; the short runs' validation change."""
    source = read_json(args.source / "report.json", "finish the source run")
    best = (source.get("baseline_best") or {}).get("name", "baseline")
    trained = source["paired"]["pooled"]["trained"]
    runs = {"base": args.source, "baseline": args.source, best: args.source, "hyper-es": args.source,
            **{row: args.root / arm for row, arm in ARMS.items() if (args.root / arm / "report.json").is_file()}}
    table, pairs = [], {}
    for row, run in runs.items():
        report = read_json(run / "report.json", "evaluate the arm")
        r = next(x for x in report["rows"] if x["name"] == row)
        table.append({"row": row, "steps": r["optimizer_steps"], "tokens": r["train_tokens"] + r["search_tokens"],
                      **{m: r["mean"].get(m) for m in ("greedy", "pass@1", "pass@8")},
                      **{t: r["results"][t]["greedy"] for t in trained}})
    for ref in dict.fromkeys(("base", "baseline", best, "hyper-es")):  # greedy, on every test problem
        pairs[ref] = {row: paired(runs, row, ref, trained, "greedy") for row in runs if row != ref}
    pairs["start"] = {row: paired(runs, row, START[row], trained, "greedy") for row in ARMS if row in runs}
    sampled = [r for r in runs if r != best]  # with Pass@k samples (not the best snapshot)
    pass_k = {m: {ref: {row: paired(runs, row, ref, trained, m) for row in sampled if row != ref}
                  for ref in ("base", "baseline", "hyper-es")} for m in ("pass@1", "pass@8")}
    short = {}
    for name in SHORT:
        d = args.root / f"short-{name}" / "es"
        if (d / "final.json").is_file():
            s0, s1 = read_json(d / "start.json", ""), read_json(d / "final.json", "")
            short[name] = {"start": s0["reward"], "final": s1["reward"],
                           "diff": stats.paired_bootstrap([(s1["per_row"], s0["per_row"])]).to_dict()}
    return {"budget_tokens": cap, "baseline_best": best, "trained_tasks": trained, "rows": table,
            "paired_greedy": pairs, "paired_pass_k": pass_k, "short_runs_val": short, "es_settings": {**ES, "seed": args.es_seed},
            "short_settings": SHORT_RUN}


def across_seeds(pairs: list[tuple[Path, Path]], results: Path) -> dict:
    """ES (from the base) minus base, the final GRPO-LoRA adapter and Hyper-ES, greedy, paired, pooled over every
    (seed, trained task) stratum: one arm folder and its decision run per seed."""
    diffs = {}
    for ref in ("base", "baseline", "hyper-es"):
        strata = []
        for root, source in pairs:
            trained = read_json(source / "report.json", "finish the source run")["paired"]["pooled"]["trained"]
            strata += [stats.align(*row_values(root / "es", "es", t, "greedy"), *row_values(source, ref, t, "greedy"),
                                   what=f"{root} es vs {ref} {t}") for t in trained]
        diffs[ref] = stats.paired_bootstrap(strata).to_dict()
    out = {"arms": [[str(r), str(s)] for r, s in pairs], "es_minus": diffs}
    write_json_atomic(results / "across_seeds.json", out)
    return out


def markdown(s: dict) -> str:
    def ci(d):
        return f"{100 * d['diff']:+.1f} [{100 * d['low']:.1f}, {100 * d['high']:.1f}]"

    def num(v):
        return "—" if v is None else f"{v:.3f}"

    best = s["baseline_best"]
    refs = tuple(dict.fromkeys(("base", "baseline", best, "hyper-es")))
    lines = [f"Budget: {s['budget_tokens']['tokens']:,} generated tokens (the Hyper-ES row: training + search). "
             "Greedy on the 1,000-problem tests of each trained task; differences in points, pooled over the trained "
             "tasks, paired bootstrap 95% CI.", "",
             f"| row | steps | tokens | {' | '.join(s['trained_tasks'])} | pass@1 | pass@8 "
             + "".join(f"| vs {r} " for r in refs) + "| vs its start |",
             "|:--|--:|--:|" + "--:|" * len(s["trained_tasks"]) + "--:|--:|" + "--:|" * (len(refs) + 1)]
    for r in s["rows"]:
        vs = [ci(s["paired_greedy"][ref][r["row"]]) if r["row"] in s["paired_greedy"].get(ref, {}) else "—"
              for ref in (*refs, "start")]
        lines.append(f"| {r['row']} | {r['steps']} | {r['tokens']:,} | "
                     + " | ".join(f"{r[t]:.3f}" for t in s["trained_tasks"])
                     + f" | {num(r['pass@1'])} | {num(r['pass@8'])} | " + " | ".join(vs) + " |")
    lines += ["", "pass@1 / pass@8: all test tasks (GSM8K included), from each report. Paired Pass@k (n = 8 at T = 1, the "
              "first 200 test problems per trained task), each row minus the base, the final GRPO-LoRA adapter and "
              "Hyper-ES, points:", "",
              "| row | pass@1 − base | pass@8 − base | pass@1 − baseline | pass@8 − baseline | pass@1 − hyper-es "
              "| pass@8 − hyper-es |", "|:--|--:|--:|--:|--:|--:|--:|"]
    for row in ["base", *s["paired_pass_k"]["pass@1"]["base"]]:
        cells = [ci(s["paired_pass_k"][m][ref][row]) if row in s["paired_pass_k"][m][ref] else "—"
                 for ref in ("base", "baseline", "hyper-es") for m in ("pass@1", "pass@8")]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    if s["short_runs_val"]:
        lines += ["", "Short runs (validation rows, ES − its start, paired):", "",
                  "| normalisation | start | final | Δ [95% CI] |", "|:--|--:|--:|--:|"]
        for name, r in s["short_runs_val"].items():
            lines.append(f"| {name} | {r['start']:.3f} | {r['final']:.3f} | {ci(r['diff'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, help="run folders (resumable; keep outside the repo)")
    p.add_argument("--source", type=Path, help="a finished decision-experiment run folder")
    p.add_argument("--results", type=Path, default=ROOT / "bench/results/es")
    p.add_argument("--summary-only", action="store_true")
    p.add_argument("--es-seed", type=int, default=0, help="es.seed of every arm (pair it with the source's seed)")
    p.add_argument("--across-seeds", nargs="+", metavar="ROOT:SOURCE",
                   help="only pool the `es` arms of several seeds (each its --root and --source) into across_seeds.json")
    p.add_argument("--arms", nargs="*", help="run only these arms (default: all), e.g. es-grpo hyperes-es")
    args = p.parse_args()
    if not args.across_seeds and (args.root is None or args.source is None):
        p.error("--root and --source are required (unless --across-seeds)")
    from hyper_es.analyze.coverage import analyze_coverage
    from hyper_es.progress import setup_logging

    setup_logging()
    args.results.mkdir(parents=True, exist_ok=True)
    if args.across_seeds:
        out = across_seeds([tuple(Path(x) for x in a.split(":", 1)) for a in args.across_seeds], args.results)
        for ref, d in out["es_minus"].items():
            print(f"es − {ref}: {100 * d['diff']:+.1f} [{100 * d['low']:.1f}, {100 * d['high']:.1f}] points, n = {d['n']}")
        print(f"command: python {' '.join(sys.argv)}")
        return
    cap = budget(args.source) if args.summary_only else run_arms(args)
    summary = summarize(args, cap)
    write_json_atomic(args.results / "summary.json", summary)
    (args.results / "summary.md").write_text(markdown(summary))
    rows = args.root / "coverage"  # the compared rows of all arms in one folder (coverage reads RUN/eval/*.json)
    (rows / "eval").mkdir(parents=True, exist_ok=True)
    for row, run in (("base", args.source), ("baseline", args.source), ("hyper-es", args.source),
                     *((row, args.root / arm) for row, arm in ARMS.items())):
        if (run / "eval" / f"{row}.json").is_file():
            shutil.copy2(run / "eval" / f"{row}.json", rows / "eval" / f"{row}.json")
    arms = [args.root / a for a in ("es", "grpo-es", "hyperes-es", *(f"short-{n}" for n in SHORT))]
    analyze_coverage([rows], args.results / "coverage", diversity_from=[a for a in arms if a.is_dir()])
    print(markdown(summary))
    print(f"command: python {' '.join(sys.argv)}")


if __name__ == "__main__":
    main()
