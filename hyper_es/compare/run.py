"""`hyper-es compare RECIPE --seeds 0 1 2 --out ROOT`: Hyper-ES against the strongest simple controls, per seed and
pooled. Stage by stage over the seeds (every seed's grid, then every seed's main run, ...), so the comparisons that
cost least are complete first; every stage resumes from its folder, and the summary is rendered after each.

    ROOT/recipe.yaml, compare.json, summary.json, summary.md, accuracy_cost.png
    ROOT/seed<N>/lr_grid.json     the baseline's lr grid (compare/grid.py), grown until its best is interior
    ROOT/seed<N>/grid/lr<lr>/     one baseline run per lr, scored on validation
    ROOT/seed<N>/main/            `hyper-es run` at the chosen lr: base, baseline, its early stop, scaled, hyper-es
    ROOT/seed<N>/<variant>/       a recipe overlay's Hyper-ES run (compare.variants)
    ROOT/seed<N>/equal/           grpo-equal-compute: the tuned baseline given the hyper-es row's tokens or time
    ROOT/seed<N>/further/         adapter-further: the best given adapter by validation, trained on with that budget

A run shares (hard links) the baseline run and the evaluated rows of another folder only where they are the same
job: the main run its lr's grid run, a variant the main run's when its baseline job is unchanged."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from hyper_es.compare.grid import overlay, score_lr, tune, variant
from hyper_es.compare.plan import ComparePlan, write_plan
from hyper_es.errors import RecipeError
from hyper_es.recipe import Recipe
from hyper_es.rundir import DIRECTIONS_DIR, EQUAL_FILE, EVAL_DIR, GRID_FILE

logger = logging.getLogger(__name__)
GRID, MAIN, EQUAL, FURTHER = "grid", "main", "equal", "further"
AT_LR = ("baseline", "baseline-best", "scaled", "grpo-equal-compute", "adapter-further")  # trained at the grid's lr
BASELINE_ROWS = ("base", "baseline", "baseline@*")  # the rows of the baseline run (and the base)
DIRECTION_ONLY = ("directions", "vary", "difficulty_rows", "difficulty_samples", "jobs", "steps", "directions_from",
                  "checkpoint_every")  # gradient fields the baseline job does not read (its steps: in its JobSpec)


def compare(recipe: Recipe, seeds: list[int], out: Path, *, figure: bool = True,
            arms: list[str] | None = None) -> tuple[dict, str]:
    """Every seed's stages (resuming), then the summary; returns it and its Markdown. `arms`: only these stages
    after the grid (main, a variant, equal, further), the others read from disk as they are."""
    from hyper_es.compare import render
    from hyper_es.directions.collect import prepare_run_dir

    out = Path(out)
    if why := recipe.mixed_training():  # the baseline's lr grid trains on every training task at once
        raise RecipeError(f"{recipe._path or '<recipe>'}: gradient.tasks: {why}")
    stages = [(MAIN, run_main), *((name, run_variant) for name in variants(recipe))]  # every overlay checked
    stages += [(EQUAL, run_equal)] if recipe.compare.equal else []
    stages += [(FURTHER, run_further)] if recipe.compare.further else []
    if arms is not None:
        if unknown := sorted(set(arms) - {name for name, _ in stages}):
            raise RecipeError(f"{recipe._path or '<recipe>'}: no arm {', '.join(unknown)} in this comparison "
                              f"(expected some of {', '.join(name for name, _ in stages)})")
        stages = [(name, stage) for name, stage in stages if name in arms]
    prepare_run_dir(recipe, out, comparison=True)  # a ROOT begun with another model, tasks or gradient is refused
    write_plan(out, plan_for(recipe))
    lrs = {seed: tune_seed(recipe, out, seed)["chosen"] for seed in seeds}
    for i, (name, stage) in enumerate(stages):
        for seed in seeds:
            logger.info("seed %d: %s", seed, name)
            stage(recipe, out / f"seed{seed}", seed, lrs[seed], name)
        if i < len(stages) - 1:  # every seed's rows of this stage in the summary before the next, dearer stage
            render(out, seeds, figure=False)
    return render(out, seeds, figure=figure)


def arm_recipe(recipe: Recipe, seed: int, lr: float, name: str = MAIN, changes: dict | None = None) -> Recipe:
    return variant(recipe, lr=lr, seed=seed, pass_k_limit=recipe.eval.pass_k_limit, overrides=changes,
                   suffix="" if name == MAIN else f"-{name}")


def variants(recipe: Recipe) -> dict[str, Recipe]:
    """name -> the variant's recipe (at the recipe's lr and seed): an overlay that makes no valid recipe is refused,
    naming it."""
    out = {}
    for name, changes in recipe.compare.variants.items():
        try:
            out[name] = arm_recipe(recipe, recipe.gradient.seed, recipe.gradient.learning_rate, name, changes)
        except RecipeError as exc:
            where = str(recipe._path or "<recipe>")
            lines = (line.removeprefix(f"{where}: ") for line in str(exc).splitlines())
            raise RecipeError("\n".join(f"{where}: compare.variants.{name}: {line}" for line in lines)) from None
    return out


def tune_seed(recipe: Recipe, out: Path, seed: int) -> dict:
    """The seed's bracketed lr grid (resumes from ROOT/seed<N>/lr_grid.json)."""
    lr0, seed_dir = recipe.gradient.learning_rate, out / f"seed{seed}"
    return tune(seed_dir / GRID_FILE, recipe.compare.lrs or [lr0 / 2, lr0, lr0 * 2],
                lambda lr: score_lr(arm_recipe(recipe, seed, lr), grid_folder(seed_dir, lr)),
                seed=seed, max_lrs=recipe.compare.max_lrs)


def grid_folder(seed_dir: Path, lr: float) -> Path:
    return seed_dir / GRID / f"lr{lr:g}"


def run_main(recipe: Recipe, seed_dir: Path, seed: int, lr: float, name: str = MAIN) -> None:
    """`hyper-es run` at the chosen lr, on its grid run's baseline and validation scorings (the same job)."""
    from hyper_es.pipeline import run

    link(grid_folder(seed_dir, lr), seed_dir / MAIN, baseline=True, rows=BASELINE_ROWS)
    run(arm_recipe(recipe, seed, lr), seed_dir / MAIN)


def run_variant(recipe: Recipe, seed_dir: Path, seed: int, lr: float, name: str) -> None:
    """A variant's Hyper-ES run: the main run's baseline and its rows where its baseline job is the same."""
    from hyper_es.pipeline import run

    mine = arm_recipe(recipe, seed, lr, name, es_budget(recipe, seed_dir, name))
    same = same_baseline(mine, arm_recipe(recipe, seed, lr))
    link(seed_dir / MAIN, seed_dir / name, baseline=same, rows=BASELINE_ROWS if same else ("base",))
    run(mine, seed_dir / name)


def es_budget(recipe: Recipe, seed_dir: Path, name: str) -> dict:
    """A variant's overlay; a `method: es` variant with no `es.max_tokens` of its own, under `equal: tokens`, gets the
    main Hyper-ES row's generated tokens (train, search and select) as its members' fitness budget."""
    changes = recipe.compare.variants[name]
    es = changes.get("es") or {}
    if changes.get("method") != "es" or "max_tokens" in es or recipe.compare.equal != "tokens":
        return changes
    from hyper_es.compare.equal import hyper_es_row

    tokens = hyper_es_row(seed_dir / MAIN)["tokens"]
    logger.info("seed %s %s: ES given the hyper-es row's %d generated tokens", seed_dir.name, name, tokens)
    return {**changes, "es": {**es, "max_tokens": int(tokens)}}


def equal_recipe(recipe: Recipe, seed_dir: Path, seed: int, lr: float) -> Recipe:
    """The control's recipe, planned once (equal/equal_compute.json) from the main run's report."""
    from hyper_es.compare.equal import equal_overlay

    plan = equal_planned(recipe, seed_dir)
    logger.info("seed %d grpo-equal-compute: %d steps of %d batches", seed, plan["steps"], plan["accumulation"])
    return arm_recipe(recipe, seed, lr, EQUAL, equal_overlay(plan))


def equal_planned(recipe: Recipe, seed_dir: Path) -> dict:
    """The equal-compute plan (equal/equal_compute.json), made once from the main run's report."""
    from hyper_es.compare.equal import planned

    return planned(seed_dir / EQUAL / EQUAL_FILE, seed_dir / MAIN, recipe.gradient.baseline_snapshot_every,
                   recipe.compare.equal_max_batches, recipe.compare.equal)


def run_equal(recipe: Recipe, seed_dir: Path, seed: int, lr: float, name: str = EQUAL) -> None:
    """grpo-equal-compute: its own baseline (more completions per step), its early stop the row."""
    baseline_arm(equal_recipe(recipe, seed_dir, seed, lr), seed_dir, EQUAL, rows=("base",), directions=False)


def baseline_arm(mine: Recipe, seed_dir: Path, name: str, *, rows: tuple[str, ...], directions: bool) -> None:
    """An arm whose row is a baseline job's early stop: the main run's `rows` linked, the job trained (with the
    recipe's given directions imported where `directions`), then the arm's final evaluation and report."""
    from hyper_es.directions.collect import collect
    from hyper_es.pipeline import evaluate_and_report
    from hyper_es.recipe.isolate import in_own_process

    folder = seed_dir / name
    link(seed_dir / MAIN, folder, baseline=False, rows=rows)
    collect(mine, folder, baseline=True, directions=directions)
    in_own_process(mine, "final evaluation and report", evaluate_and_report, folder, None)


def run_further(recipe: Recipe, seed_dir: Path, seed: int, lr: float, name: str = FURTHER) -> None:
    """adapter-further: the given adapter best on the main run's validation, imported, and trained on by the
    baseline job (from base + its ΔW) with grpo-equal-compute's budget; its early stop the row."""
    from hyper_es.compare.further import choose, further_changes, given_names

    choice = choose(seed_dir / MAIN, seed_dir / FURTHER, recipe)
    mine = arm_recipe(recipe, seed, lr, FURTHER, further_changes(choice, equal_planned(recipe, seed_dir)))
    logger.info("seed %d adapter-further: %s (validation %.3f) trained on", seed, choice["adapter"],
                choice["val"][choice["adapter"]])
    baseline_arm(mine, seed_dir, FURTHER, rows=("base", "uniform", *given_names(recipe)), directions=True)


def same_baseline(a: Recipe, b: Recipe) -> bool:
    """Whether two recipes train the same baseline job (model, tasks, its JobSpec and every gradient field it reads)."""
    from hyper_es.directions.jobs import plan_baseline

    def job(r: Recipe) -> dict:
        d = r.model_dump(mode="json")
        return {"model": d["model"], "tasks": d["tasks"], "eval": d["eval"],
                "gradient": {k: v for k, v in d["gradient"].items() if k not in DIRECTION_ONLY}}

    return job(a) == job(b) and plan_baseline(a) == plan_baseline(b)


def link(src: Path, dest: Path, *, baseline: bool, rows: tuple[str, ...]) -> None:
    """Hard links in `dest` to `src`'s baseline run (directions/baseline) and to the evaluation files (test and
    validation) of `rows` (glob patterns), where `dest` has none yet; a copy where links are not possible."""
    def put(f: Path | str, target: Path | str) -> None:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, target)
        except OSError:
            shutil.copy2(f, target)

    final = dest / DIRECTIONS_DIR / "baseline"
    if baseline and (src / DIRECTIONS_DIR / "baseline").is_dir() and not final.exists():
        work = final.with_name(".baseline-linking")  # whole or not at all: a kill mid-copy leaves no half baseline
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src / DIRECTIONS_DIR / "baseline", work, copy_function=put)
        work.rename(final)
    for pattern in rows:
        for sub in (EVAL_DIR, f"{EVAL_DIR}/val"):
            for f in (src / sub).glob(f"{pattern}.json"):
                if not (dest / sub / f.name).exists():
                    put(f, dest / sub / f.name)


def plan_for(recipe: Recipe) -> ComparePlan:
    """The comparison's plan: Hyper-ES and each variant (a `method: es` variant is an ES row, with no search start)
    against the baseline's early stop, `scaled`, grpo-equal-compute, each `eval.merges` merge and, with `gradfit:`,
    the gradient-fitted genome (the controls), the final baseline and the base; each Hyper-ES method against its
    own search start; the grid's cost charged to every row trained at its lr. With given directions (composition)
    each given adapter alone and their average (`uniform`) are controls too, only the baseline's rows are trained
    at the grid's lr, the goal has no steps ratio (the adapters' own training is shown apart), and every row is
    paired with every other."""
    from hyper_es.compare.further import given_names
    from hyper_es.compare.plan import Goal
    from hyper_es.rows.names import es_row, merged, prompted

    rows: dict[str, tuple[str, str | None]] = {}

    def put(label: str, where: tuple[str, str | None]) -> str:
        """A row, refused where its label is taken (a given adapter or a variant named like another row)."""
        if label in rows:
            raise RecipeError(f"{recipe._path or '<recipe>'}: '{label}' names two rows of the comparison (a given "
                              f"adapter's or a variant's name); expected another name (directions.adapters: {{path: "
                              f"..., name: ...}}, or another compare.variants key)")
        rows[label] = where
        return label

    for label, row in (("base", "base"), ("baseline", "baseline"), ("baseline-best", None), ("scaled", "scaled"),
                       ("hyper-es", "hyper-es"), ("hyper-es-start", "search-start")):
        put(label, (MAIN, row))
    methods, marked = ["hyper-es"], []
    for name, changes in recipe.compare.variants.items():
        arm = overlay(recipe.model_dump(mode="json"), changes)
        if arm.get("method") == "es":  # full-parameter ES from the arm's start, against every control
            methods.append(put("es" if name == "es" else f"es-{name}",
                               (name, es_row((arm.get("es") or {}).get("start", "base")))))
            continue
        coevolved = arm.get("coevolve") is not None
        methods.append(put(f"hyper-es-{name}", (name, prompted("hyper-es") if coevolved else "hyper-es")))
        put(f"hyper-es-{name}-start", (name, "search-start"))
        marked += [f"hyper-es-{name}"] if coevolved else []
    for row in (recipe.coevolve.controls if recipe.coevolve else []):  # prompt controls: <row>+prompt
        marked.append(put(prompted(row), (MAIN, prompted(row))))
    controls = ["baseline-best", "scaled", *(r for r in rows if r in marked and rows[r][0] == MAIN)]
    given = recipe.directions is not None  # composition: the searched directions exist already (not trained here)
    for name in [*given_names(recipe), "uniform"] if given else []:  # each adapter alone, and their average
        controls.append(put(name, (MAIN, name)))
    for name in map(merged, recipe.eval.merges):  # the directions merged at one validated lambda (composition)
        controls.append(put(name, (MAIN, name)))
    if recipe.gradfit:  # the same genome fitted by gradient: is the search the right optimiser for its subspace?
        controls.append(put("grad-fit", (MAIN, "grad-fit")))
    if recipe.compare.equal:
        controls.append(put("grpo-equal-compute", (EQUAL, None)))
    if recipe.compare.further:  # the best given adapter trained on at the same budget
        controls.append(put("adapter-further", (FURTHER, None)))
    started = [m for m in methods if f"{m}-start" in rows]  # the Hyper-ES methods: each against its search start
    pairs = [(m, f"{m}-start") for m in started] + [(f"{m}-start", c) for m in started for c in controls]
    pairs += [("grpo-equal-compute", "baseline-best")] if recipe.compare.equal else []
    if given:  # a composition: each row minus each other (the controls among themselves and against the refs too)
        order = [*methods, *(f"{m}-start" for m in started), *controls, "baseline", "base"]
        have = {frozenset(p) for p in pairs} | {frozenset((m, c)) for m in methods for c in order if c != m}
        pairs += [(a, b) for i, a in enumerate(order) for b in order[i + 1:] if frozenset((a, b)) not in have]
    return ComparePlan(
        title=f"Hyper-ES against the strongest simple controls ({recipe.name}, {recipe.model.name})", rows=rows,
        methods=methods, controls=controls, refs=["baseline", "base"], pairs=pairs, prompted=marked,
        transfer=recipe.compare.transfer, pass_k=[f"pass@{k}" for k in recipe.eval.k],
        equal_arm=EQUAL if recipe.compare.equal else None,
        partial_arms=[MAIN, *recipe.compare.variants],
        curves={MAIN: "baseline", **({EQUAL: "grpo-equal-compute"} if recipe.compare.equal else {})},
        tuned=[label for label in rows if label != "base" and (not given or label in AT_LR)],
        goal=Goal(steps_ratio=None) if given else Goal())
