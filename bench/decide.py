"""The decision experiment: Hyper-ES against the strongest simple alternatives, paired, over three seeds.

    python bench/decide.py --root ROOT/decide2                     # every seed and stage; re-running resumes
    python bench/decide.py --root ROOT/decide2 --stages grid main  # only these stages (in this order per seed)
    python bench/decide.py --summary-only                          # the summary from the committed artefacts
    python bench/decide.py --root ROOT/decide2 --save              # copy every stage's state now, to commit

Run folders live outside the repository and may not outlive the machine. On a new machine a stage trains its
GRPO jobs again (TRL on CPU repeats them bit for bit), checks them against the committed manifests, and takes back
the committed search checkpoint and evaluated rows, so it goes on where it stopped.

Per seed N (gradient.seed = fitness.seed = N), every stage in its own run folder under --root:
1. grid: the baseline's lr grid on validation, extended until its best lr is interior (bench/baseline_grid.py);
   its folder at the chosen lr is the main run.
2. main: `hyper-es run` there. Directions: the baseline run's increments (directions_from: snapshots). Rows: base,
   baseline (final), its best candidate by validation (`baseline_best`, the base as step 0), `scaled`, uniform,
   hyper-es.
3. difficulty: Hyper-ES with the paper's directions: K GRPO-LoRA jobs, each on one bin of the train rows by the
   base pass rate (vary: difficulty, seed), at the same lr, K × steps = the main run's direction steps. The
   baseline and the rows it shares with the main run are hard links to the main run's (same weights and records).
4. coevolve: issue 22's arms (prompt-only, prompts and coefficients co-evolved) on the main run's directions.
   controls: the prompt control the arms must beat: `scaled` with, per task, the best one-gene change of its own
   prompt (the arms' genes, `coevolve.controls`), chosen on validation; evaluation only, in a folder linking the
   main run's directions and rows.
5. equal: `grpo-equal-compute`: the baseline at the same lr, seed, steps and snapshots, each step accumulating as
   many batches as it takes for its generated tokens to reach the main Hyper-ES row's total (train + search +
   select tokens), or with --equal-budget seconds its wall time (recorded in equal_compute.json); its best
   candidate by validation is the row. It checkpoints every step, so it resumes across kills; --train-only runs
   its training alone (no engine), beside another stage.
6. cheap: issue 44's cheaper search (`CHEAP`) from the main search's start, at a quarter of its tokens.
7. raced: issue 44's racing (`RACED`): today's search from the main search's start, its generations raced.
Artefacts (no weights) go to --results/seed<N>/<stage>/; summary.json / summary.md / the figures pair every
Hyper-ES row with every control per seed and pooled over seeds (problems resampled within seed × task), with the
seed-level mean and range beside the pooled CI, and check the goal.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from baseline_grid import lr_folder, tune, variant  # noqa: E402  (bench/ is the script's folder)
from hyper_es.compare.equal import equal_overlay, planned  # noqa: E402
from hyper_es.compare.run import link  # noqa: E402
from hyper_es.io import read_json, write_json_atomic  # noqa: E402

logger = logging.getLogger("decide")
STAGES = ("grid", "main", "difficulty", "coevolve", "controls", "equal", "cheap", "raced")
COPY = ["recipe.yaml", "report.json", "report.md", "geometry.json", "search/generations.jsonl",
        "search/result.json", "search/best.json", "search/scale_scan.json", "search/checkpoint.json",
        "directions/difficulty.json", "equal_compute.json", "search/prompt.json", "scale_fit.json"]
RESTORED = ("search", "eval", "directions/difficulty.json")  # what a new machine takes back from the artefacts
SAME_JOB = ("optimizer_steps", "seen_tokens", "token_curve", "reward_curve")
WEIGHT_ANALYSES = ("geometry.json", "scale_fit.json")  # of the jobs' weights: a retrain's differ in the last digits
SHARED_ROWS = ("base", "baseline", "baseline@*", "scaled", "scaled@*")  # the same weights in every folder of a seed
DIFFICULTY = {"gradient.directions_from": "jobs", "gradient.vary": ["difficulty", "seed"]}
# Co-evolution (issue 22): generic prompt genes, nothing about these tasks (the task's own prompt is gene 0), a
# population of 4 with one prompt per vector, so each arm makes the parameter-only search's scorings.
COEVOLVE_GENES = {
    "systems": ["You are a helpful assistant.",
                "You are a careful problem solver. Check your work before you answer."],
    "templates": ["{question}\nThink step by step, then give the final answer in \\boxed{{}}.",
                  "Solve the following problem.\n{question}\nPut the final answer in \\boxed{{}}."],
    "formats": ["Reply with the final answer only.", "Keep the reasoning short."],
    "max_shots": 3}
# Issue 44's cheaper search, fixed before it ran (nothing tuned to these tasks): half the fitness rows, no
# per-generation validation re-scores, CMA-ES's mean as the answer (the recommendation under noise), and a token
# budget of a quarter of the main row's search and selection tokens (the guard's two validation scorings come on top).
CHEAP = {"fitness.minibatch": 32, "fitness.rescore_top": 0, "search.recommend": "mean", "eval.k": [1]}
CHEAP_SHARE = 4
# Issue 44's racing, fixed before it runs: today's search (same rows, generations and re-scores), each generation
# raced over rungs of 32 and 64 of its 128 rows at the module's default confidence; only what racing changes.
RACED = {"fitness.race": {"rungs": [32, 64], "delta": 0.05}}
ARMS = {"prompt": "fixed", "both": "search"}  # arm -> coevolve.weights (the parameter-only arm is the main run)


def folders(root: Path, seed: int, lr: float) -> dict[str, Path]:
    main = lr_folder(root, seed, lr)
    return {"main": main, "difficulty": main.with_name(main.name + "-difficulty"),
            "equal": main.with_name(main.name + "-equal")}


def link_shared(src: Path, dest: Path, *, baseline: bool, rows: tuple[str, ...] = SHARED_ROWS) -> None:
    """Hard links to the main run's baseline (directions/baseline) and the evaluation files of `rows`: only rows whose
    weights `dest` shares (a folder that trains its own baseline shares the base alone). The toolkit's `link`."""
    link(src, dest, baseline=baseline, rows=rows)


def share_base(results: Path, run_dir: Path) -> bool:
    """The base row is the same weights, test rows, decoding and per-problem sampling seeds in every seed (a seed
    re-seeds training and the search only), so it is evaluated once: take another seed's committed base row when
    the model, the tasks and the evaluation settings that shape it are the same."""
    if (run_dir / "eval" / "base.json").is_file():
        return False
    mine = read_yaml(run_dir / "recipe.yaml")
    for other in sorted(results.glob("seed*/main/eval/base.json")):
        theirs = read_yaml(other.parents[1] / "recipe.yaml")
        if all(_shaping(theirs, k) == _shaping(mine, k) for k in ("model", "tasks", "eval")):
            (run_dir / "eval").mkdir(parents=True, exist_ok=True)
            shutil.copy2(other, run_dir / "eval" / "base.json")
            logger.info("%s: the base row taken from %s (same model, tasks and evaluation)", run_dir.name, other)
            return True
    return False


def _shaping(recipe: dict, section: str):
    """What of a recipe section decides the base row's test records (not which rows are tested, nor how many)."""
    value = recipe.get(section)
    return {k: v for k, v in value.items() if k not in ("snapshots", "pass_k_tasks")} if section == "eval" else value


def read_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def restore(saved: Path, run_dir: Path) -> bool:
    """On a new machine: once a stage's GRPO jobs are trained again (TRL on CPU repeats them bit for bit), take
    back what its committed artefacts hold (the search's checkpoint and log, evaluated rows), so the stage goes on
    where it stopped. Only when every retrained job matches its committed manifest (steps, tokens, reward curve)."""
    manifests = sorted(saved.glob("directions/*/manifest.json"))
    if not manifests:
        return False
    for m in manifests:
        mine = run_dir / m.relative_to(saved)
        theirs, ours = read_json(m, ""), read_json(mine, "") if mine.is_file() else {}
        if any(theirs.get(k) != ours.get(k) for k in SAME_JOB):
            logger.warning("%s differs from the committed %s: starting the stage afresh", mine, m)
            return False
    logger.info("%s: %d files taken back from %s", run_dir.name, take_back(saved, run_dir, RESTORED), saved)
    return True


def take_back(saved: Path, run_dir: Path, prefixes: tuple[str, ...]) -> int:
    """Copy the committed files under `prefixes` that `run_dir` lacks; how many."""
    n = 0
    for f in sorted(p for p in saved.rglob("*") if p.is_file()):
        rel = f.relative_to(saved)
        if str(rel).startswith(prefixes) and not (run_dir / rel).exists():
            (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, run_dir / rel)
            n += 1
    return n


def run_main(args, seed: int, lr: float) -> Path:
    from hyper_es.directions.collect import collect
    from hyper_es.pipeline import run

    run_dir = folders(args.root, seed, lr)["main"]
    recipe = variant(args.recipe, lr=lr, seed=seed, pass_k_limit=args.pass_k_limit)
    collect(recipe, run_dir, baseline=True)
    restore(args.results / f"seed{seed}" / "main", run_dir)
    share_base(args.results, run_dir)
    run(recipe, run_dir)
    scale_fit(recipe, run_dir)
    return run_dir


def scale_fit(recipe, run_dir: Path) -> None:
    """How much of the Hyper-ES update one scale of the final GRPO update explains (`hyper-es analyze scale-fit`):
    the ablation that says whether the layer-wise search found more than the `scaled` control's one scale."""
    from hyper_es.analyze.scale_fit import analyze_scale_fit

    if not (run_dir / "scale_fit.json").is_file():
        analyze_scale_fit(recipe, run_dir, ["hyper-es"], "baseline", run_dir)


def run_difficulty(args, seed: int, lr: float) -> Path:
    from hyper_es.directions.collect import collect
    from hyper_es.evaluate.pass_rates import measure_difficulty
    from hyper_es.pipeline import run

    f = folders(args.root, seed, lr)
    run_main(args, seed, lr)  # the stage builds on the main run (on a new machine: retrained, then taken back)
    link_shared(f["main"], f["difficulty"], baseline=True)
    recipe = variant(args.recipe, lr=lr, seed=seed, pass_k_limit=args.pass_k_limit, overrides=DIFFICULTY,
                     suffix="-difficulty")
    saved = args.results / f"seed{seed}" / "difficulty"
    take_back(saved, f["difficulty"], ("directions/difficulty.json",))  # the jobs' bins, as measured before
    collect(recipe, f["difficulty"], baseline=True, measure=measure_difficulty)
    restore(saved, f["difficulty"])
    run(recipe, f["difficulty"])
    scale_fit(recipe, f["difficulty"])
    return f["difficulty"]


def from_main_start(main: Path, stage: str) -> Path:
    """The folder of a stage that searches the main run's directions from the main search's start: the directions
    (hard links), the scale scan and geometry (copied), and the rows of those weights (linked: base, the baseline's,
    scaled, uniform and search-start)."""
    folder = main.with_name(f"{main.name}-{stage}")
    if not (folder / "directions").is_dir():
        shutil.copytree(main / "directions", folder / "directions", copy_function=os.link)
    link_shared(main, folder, baseline=False, rows=(*SHARED_ROWS, "uniform", "search-start"))
    for rel in ("geometry.json", "search/scale_scan.json"):
        if not (folder / rel).is_file():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(main / rel, folder / rel)
    return folder


def run_coevolve(args, seed: int, lr: float) -> list[Path]:
    """Issue 22's arms on the main run's directions, start and rows: prompt-only (`coevolve.weights: fixed`, the
    weights at the main search's start) and both (prompts and coefficients co-evolved). The parameter-only arm is the
    main run's hyper-es row. Each arm scores as many candidates as the main search, from its scale scan (copied:
    the same start, its tokens charged again to each arm)."""
    from hyper_es.pipeline import run

    main, out = run_main(args, seed, lr), []  # on a new machine: retrained, then taken back
    for arm, weights in ARMS.items():
        folder = from_main_start(main, f"coevolve-{arm}")
        tasks = load_recipe_tasks(args.recipe)
        recipe = variant(args.recipe, lr=lr, seed=seed, pass_k_limit=args.pass_k_limit, suffix=f"-coevolve-{arm}",
                         overrides={"coevolve": {"tasks": {t: COEVOLVE_GENES for t in tasks}, "population": 4,
                                                 "elite": 2, "pairs": 1, "seed": seed, "weights": weights}})
        restore(args.results / f"seed{seed}" / f"coevolve-{arm}", folder)
        run(recipe, folder)
        out.append(folder)
    return out


def run_cheap(args, seed: int, lr: float) -> Path:
    """Issue 44's cheaper search (`CHEAP`) on the main run's directions from the main search's start (its scale
    scan copied, its tokens charged again), with 1/`CHEAP_SHARE` of the main row's search and selection tokens as
    its budget. The folder links the main run's directions and evaluated rows, so only its hyper-es row is new."""
    main = run_main(args, seed, lr)
    saved = args.results / f"seed{seed}" / "main" / "report.json"
    row = next(r for r in read_json(saved if saved.is_file() else main / "report.json", "")["rows"]
               if r["name"] == "hyper-es")
    budget = (row["search_tokens"] + row["select_tokens"]) // CHEAP_SHARE
    return search_from_main_start(args, seed, lr, main, "cheap", {**CHEAP, "search.max_tokens": budget})


def search_from_main_start(args, seed: int, lr: float, main: Path, stage: str, overrides: dict) -> Path:
    """A stage's Hyper-ES run with `overrides` on the main run's directions, from the main search's start
    (`from_main_start`), resumed from its saved artefacts."""
    from hyper_es.pipeline import run

    folder = from_main_start(main, stage)
    recipe = variant(args.recipe, lr=lr, seed=seed, pass_k_limit=args.pass_k_limit, suffix=f"-{stage}",
                     overrides=overrides)
    restore(args.results / f"seed{seed}" / stage, folder)
    run(recipe, folder)
    return folder


def run_raced(args, seed: int, lr: float) -> Path:
    """Issue 44's racing (`RACED`): today's search on the main run's directions from its start (the scale scan
    copied, its tokens charged again), each generation raced; the folder links the main run's rows."""
    return search_from_main_start(args, seed, lr, run_main(args, seed, lr), "raced", RACED)


def run_controls(args, seed: int, lr: float) -> Path:
    """The prompt control (`coevolve.controls: [scaled]`): the main run's `scaled` weights with the best one-gene
    prompt per task by validation, from the co-evolution arms' genes. Its folder links the main run's directions and
    evaluated rows, so the final evaluation scores only the control (its validation scan, then its test row)."""
    from hyper_es.directions.collect import prepare_run_dir
    from hyper_es.pipeline import evaluate_and_report

    main = run_main(args, seed, lr)
    folder = main.with_name(f"{main.name}-controls")
    if not (folder / "directions").is_dir():
        shutil.copytree(main / "directions", folder / "directions", copy_function=os.link)
    link_shared(main, folder, baseline=False, rows=(*SHARED_ROWS, "uniform", "dir-*"))
    tasks = load_recipe_tasks(args.recipe)
    recipe = variant(args.recipe, lr=lr, seed=seed, pass_k_limit=args.pass_k_limit, suffix="-controls",
                     overrides={"coevolve": {"tasks": {t: COEVOLVE_GENES for t in tasks}, "controls": ["scaled"]}})
    restore(args.results / f"seed{seed}" / "controls", folder)
    prepare_run_dir(recipe, folder)
    evaluate_and_report(recipe, folder, recipe.eval.backend)
    return folder


def load_recipe_tasks(path: Path) -> list[str]:
    """The searched tasks, by the toolkit's rule (Recipe.searched_task_names)."""
    from hyper_es.recipe import load_recipe

    return load_recipe(path).searched_task_names()


def equal_recipe(args, seed: int, lr: float):
    """(the equal-compute run's recipe, its folder): planned once (equal_compute.json) from the main run's report,
    the committed one where there is one (so its training can start before the main run is rebuilt here)."""
    from hyper_es.recipe import load_recipe

    f, g = folders(args.root, seed, lr), load_recipe(args.recipe).gradient
    saved = args.results / f"seed{seed}" / "main"  # the committed record first: a rebuilt run's wall times
    main = saved if (saved / "report.json").is_file() else f["main"]  # come from retraining, not the search's run
    plan = planned(f["equal"] / "equal_compute.json", main, g.baseline_snapshot_every, args.equal_max_batches,
                   args.equal_budget)
    logger.info("seed %d grpo-equal-compute: %s", seed, plan)
    recipe = variant(args.recipe, lr=lr, seed=seed, pass_k_limit=args.pass_k_limit, suffix="-equal",
                     overrides=equal_overlay(plan))
    return recipe, f["equal"]


def train_equal(args, seed: int, lr: float) -> Path:
    """The equal-compute run's GRPO training alone (no engine: it can run beside another stage's engine)."""
    from hyper_es.directions.collect import collect

    recipe, folder = equal_recipe(args, seed, lr)
    collect(recipe, folder, baseline=True, directions=False)
    return folder


def run_equal(args, seed: int, lr: float) -> Path:
    from hyper_es.pipeline import evaluate_and_report

    main = run_main(args, seed, lr)  # the stage builds on the main run (on a new machine: retrained, then taken back)
    folder = train_equal(args, seed, lr)
    recipe, _ = equal_recipe(args, seed, lr)
    link_shared(main, folder, baseline=False, rows=("base",))  # its own baseline: only the base is shared
    restore(args.results / f"seed{seed}" / "equal", folder)
    evaluate_and_report(recipe, folder, None)
    return folder


def copy_artefacts(run_dir: Path, dest: Path) -> None:
    """The stage's artefacts to `dest`. A job the record already holds, retrained here bit for bit (a stage resumed
    on another machine), keeps its first manifest, and the report is then made again from the record, so the
    stage's costs are the times first measured, not a retrain's; the analyses of its weights stay first measured too."""
    rels = COPY + [str(p.relative_to(run_dir)) for p in sorted(run_dir.glob("eval/**/*.json"))
                   if "engine" not in p.parts]
    jobs = [str(p.relative_to(run_dir)) for p in sorted(run_dir.glob("directions/*/manifest.json"))]
    kept = [rel for rel in jobs if (dest / rel).is_file() and all(
        read_json(dest / rel, "").get(k) == read_json(run_dir / rel, "").get(k) for k in SAME_JOB)]
    for rel in rels + jobs:
        if not (run_dir / rel).is_file() or rel in kept or (kept and rel in WEIGHT_ANALYSES and (dest / rel).is_file()):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(run_dir / rel, dest / rel)
    if kept and (run_dir / "report.json").is_file():
        remake_report(report_rows(run_dir), dest)


def chosen_lr(args, seed: int) -> float:
    mine, saved = args.root / f"seed{seed}" / "lr_grid.json", args.results / f"seed{seed}" / "lr_grid.json"
    if not mine.is_file() and saved.is_file():  # a new machine: the committed grid, not a retrained one
        mine.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(saved, mine)
    grid = tune(args.recipe, args.root, seed, args.lrs, args.max_lrs)  # a finished grid is read back
    save_grid(grid, saved)
    return grid["chosen"]


def save_grid(grid: dict, path: Path) -> None:
    """The grid (finished or not) to the results, keeping what else the committed file holds (a note)."""
    kept = {k: v for k, v in read_json(path, "").items() if k not in grid} if path.is_file() else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {**grid, **kept})


def train_only(args) -> None:
    """--train-only: the equal-compute runs' GRPO training alone, no engine, for a spare core beside another
    stage's engine (e.g. `--train-only --seeds 0` while `--seeds 1 --stages main` runs)."""
    for seed in args.seeds:
        lr = read_json(args.results / f"seed{seed}" / "lr_grid.json", "run that seed's grid first")["chosen"]
        logger.info("seed %d: equal-compute training done in %s", seed, train_equal(args, seed, lr))


def run_stages(args) -> None:
    """Stage by stage over the seeds (every seed's grid, then every seed's main run, ...), so the comparisons
    that cost least are complete first."""
    for seed in args.seeds:
        chosen_lr(args, seed)
    for stage, fn in (("main", run_main), ("difficulty", run_difficulty), ("coevolve", run_coevolve),
                      ("controls", run_controls), ("equal", run_equal), ("cheap", run_cheap), ("raced", run_raced)):
        for seed in args.seeds if stage in args.stages else []:
            lr = chosen_lr(args, seed)
            done = fn(args, seed, lr)
            for folder in done if isinstance(done, list) else [done]:
                copy_artefacts(folder, args.results / f"seed{seed}" / stage_name(folders(args.root, seed, lr)["main"],
                                                                                  folder))
            summarize(args)


def stage_name(main: Path, folder: Path) -> str:
    """A stage folder's name under --results/seed<N>/: main, difficulty, equal, coevolve-<arm> (the main run's
    folder name, then -<stage>)."""
    return "main" if folder == main else folder.name.removeprefix(main.name + "-")


def save(args) -> None:
    """Copy what every unfinished stage folder holds now (a stage still running included) to --results, to commit."""
    for seed in args.seeds:
        grid = args.root / f"seed{seed}" / "lr_grid.json"
        if not grid.is_file():
            continue
        save_grid(read_json(grid, ""), args.results / f"seed{seed}" / "lr_grid.json")  # a grid still growing too
        if read_json(grid, "").get("chosen") is None:
            continue
        main = folders(args.root, seed, read_json(grid, "")["chosen"])["main"]
        for folder in sorted(p for p in main.parent.glob(f"{main.name}*") if p.is_dir()):
            if folder == main or folder.name.startswith(main.name + "-"):
                dest = args.results / f"seed{seed}" / stage_name(main, folder)
                if (dest / "report.json").is_file():  # a finished stage keeps its record as measured (a stage
                    add_rows(folder, dest)  # rebuilt here to build on would bring this machine's retrain times)
                    continue
                copy_artefacts(folder, dest)
                logger.info("seed %d %s: copied to %s", seed, stage_name(main, folder), dest)


def add_rows(run_dir: Path, dest: Path) -> None:
    """Rows a finished stage's committed record lacks (a row kind added since, evaluated here on the rebuilt run):
    their test records go to `dest`, and its report is made again from the committed artefacts alone (manifests,
    search log, validation scorings), so every cost stays the one measured when the stage ran."""
    if not (run_dir / "report.json").is_file():
        return
    names = report_rows(run_dir)
    new = [n for n in names if not (dest / "eval" / f"{n}.json").is_file() and (run_dir / "eval" / f"{n}.json").is_file()]
    if not new:
        return
    for n in new:
        shutil.copy2(run_dir / "eval" / f"{n}.json", dest / "eval" / f"{n}.json")
    remake_report(names, dest)
    logger.info("%s: rows %s added; its report made again from the committed artefacts", dest, ", ".join(new))


def report_rows(run_dir: Path) -> list[str]:
    return [r["name"] for r in read_json(run_dir / "report.json", "").get("rows", [])]


def remake_report(names: list[str], dest: Path) -> None:
    """`dest`'s report made from its own artefacts, with the rows `names` (in that order) that it holds."""
    import hyper_es as hx
    from hyper_es.evaluate.final import read_row, read_val, has_val
    from hyper_es.report import run_report, write_report

    rows = []
    for n in (n for n in names if (dest / "eval" / f"{n}.json").is_file()):
        row = read_row(dest / "eval" / f"{n}.json")
        rows.append({**row, **({"val": read_val(dest / "eval", n)} if has_val(row["kind"], n) else {})})
    write_report(dest, run_report(hx.recipe.load_run_recipe(dest), dest, rows))


def summarize(args) -> None:
    from decide_summary import write_summary  # bench/decide_summary.py

    write_summary(args.results, args.seeds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes/smollm2-135m.yaml")
    p.add_argument("--root", type=Path, help="run folders (resumable; keep outside the repo)")
    p.add_argument("--results", type=Path, default=ROOT / "bench/results/decide2")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES,
                   help="grid always runs (finished lrs are read back); the others in this order per seed")
    p.add_argument("--lrs", type=float, nargs="+", default=[1.25e-4, 2.5e-4, 5e-4], help="the grid's start")
    p.add_argument("--max-lrs", type=int, default=6)
    p.add_argument("--pass-k-limit", type=int, default=200)
    p.add_argument("--equal-budget", choices=("tokens", "seconds"), default="tokens",
                   help="grpo-equal-compute matches Hyper-ES's generated tokens (default) or its wall time")
    p.add_argument("--equal-max-batches", type=int, help="cap grpo-equal-compute's batches (its steps × "
                   "accumulated batches; recorded: then it is not equal compute); default: no cap")
    p.add_argument("--summary-only", action="store_true")
    p.add_argument("--train-only", action="store_true", help="only the equal-compute runs' GRPO training (no "
                   "engine: it can share the machine with another stage's run)")
    p.add_argument("--save", action="store_true", help="only copy every stage folder's artefacts now (to commit "
                   "before a session ends; a new machine takes them back after retraining the jobs)")
    args = p.parse_args()
    from hyper_es.progress import setup_logging

    setup_logging()
    if args.save:
        return save(args) if args.root else p.error("--save needs --root")
    if args.train_only:
        return train_only(args) if args.root else p.error("--train-only needs --root")
    if not args.summary_only:
        if args.root is None:
            p.error("--root is required unless --summary-only")
        args.root.mkdir(parents=True, exist_ok=True)
        run_stages(args)
    summarize(args)
    print(f"command: python {' '.join(sys.argv)}")


if __name__ == "__main__":
    main()
