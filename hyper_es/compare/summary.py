"""A comparison's summary from its run folders (ROOT/seed<N>/<arm>/report.json and eval/): every row's accuracy and
cost per seed, every planned pair's paired bootstrap difference per seed and pooled over seeds (problems resampled
within seed × task), the seed-level mean and range beside the pooled CI, and the goal."""

from __future__ import annotations

from pathlib import Path

from hyper_es.compare.plan import ComparePlan
from hyper_es.evaluate import stats
from hyper_es.evaluate.final import row_values
from hyper_es.io import read_json
from hyper_es.rows import prompt_file
from hyper_es.rundir import EQUAL_FILE, EVAL_DIR, GRID_FILE, REPORT_FILE

POOLING = "mean over seed × task strata, equal weights; problems resampled within each stratum"


def seed_dirs(root: Path, seeds: list[int] | None) -> dict[int, Path]:
    """ROOT/seed<N>/ for the given seeds, else for every seed folder on disk, in order."""
    if seeds is None:
        seeds = sorted(int(p.name[4:]) for p in Path(root).glob("seed*") if p.is_dir() and p.name[4:].isdigit())
    return {s: Path(root) / f"seed{s}" for s in seeds}


def _report(folder: Path) -> dict | None:
    path = folder / REPORT_FILE
    return read_json(path, "re-run that arm") if path.is_file() else None


def resolve(plan: ComparePlan, seed_dir: Path) -> dict[str, dict]:
    """label -> {"folder", "row" (the report row), "trained", "tasks"} for every row whose arm has finished."""
    out, reports = {}, {arm: _report(seed_dir / arm) for arm in dict.fromkeys(a for a, _ in plan.rows.values())}
    for label, (arm, name) in plan.rows.items():
        report = reports[arm]
        if report is None:
            continue
        want = name or (report.get("baseline_best") or {}).get("name")
        row = next((r for r in report["rows"] if r["name"] == want), None)
        if row is not None and name is None:
            row = early_stop_cost(seed_dir / arm, row)
        if row is not None:
            out[label] = {"folder": seed_dir / arm, "row": row, "tasks": report["tasks"],
                          "trained": report["paired"]["pooled"].get("trained", [])}
    return out


def early_stop_cost(folder: Path, row: dict) -> dict:
    """The best candidate by validation as an early stop: the baseline run up to its step (pro rata) and the scoring
    of every candidate that was scored to choose it, whichever it is (the final adapter or the base included)."""
    from hyper_es.rows.charge import Context, selection_costs, snapshot_cost

    steps, val = row["optimizer_steps"], selection_costs(folder, [])
    cost = snapshot_cost(folder, {"steps": steps}, Context([], val=val)) if steps else val["baseline"]
    return {**row, "train_tokens": cost.train_tokens, "search_tokens": 0, "select_tokens": cost.select_tokens,
            "tokens": cost.tokens, "wall_s": cost.seconds}


class _Values(dict):
    """`row_values`, each (folder, row, task, metric) read once per summary: a row is in many pairs."""

    def __call__(self, folder: Path, row: str, task: str, metric: str = "greedy") -> tuple[list, list[float]]:
        key = (str(folder), row, task, metric)
        if key not in self:
            self[key] = row_values(folder, row, task, metric)
        return self[key]


def _strata(values: _Values, a: dict, b: dict, tasks: list[str], metric: str, what: str) -> list:
    return [stats.align(*values(a["folder"], a["row"]["name"], t, metric),
                        *values(b["folder"], b["row"]["name"], t, metric), what=f"{what} {t}") for t in tasks]


def _sampled(r: dict, metric: str) -> bool:
    """Whether the row was sampled for `metric` (a Pass@k it has: a row sampled n=1 times has no Pass@8)."""
    return any(metric in res for res in r["row"]["results"].values())


def row_entry(r: dict, trained: list[str], grid: dict | None = None) -> dict:
    """A row's accuracy and cost; `grid` (the lr grid's other lrs, `grid_cost`) is added to its cost when given."""
    row = r["row"]
    greedy = {t: res["greedy"] for t, res in row["results"].items()}
    g = grid or {"train_tokens": 0, "select_tokens": 0, "seconds": 0.0}
    return {"name": row["name"], "steps": row["optimizer_steps"], "train_tokens": row["train_tokens"] + g["train_tokens"],
            "search_tokens": row["search_tokens"], "select_tokens": row["select_tokens"] + g["select_tokens"],
            "tokens": row["tokens"] + g["train_tokens"] + g["select_tokens"], "wall_s": row["wall_s"] + g["seconds"],
            "greedy": greedy, "trained": sum(greedy[t] for t in trained) / len(trained) if trained else None,
            "val": (row.get("val") or {}).get("mean"), **({"grid": grid} if grid else {})}


def grid_cost(seed_dir: Path) -> dict | None:
    """What choosing the lr cost besides the chosen lr's own run: every other lr's training and validation scoring
    (seed<N>/lr_grid.json); None without a finished grid."""
    path = seed_dir / GRID_FILE
    grid = read_json(path, "re-run the comparison's grid") if path.is_file() else {}
    if grid.get("chosen") is None:
        return None
    others = [v for lr, v in grid["lrs"].items() if float(lr) != grid["chosen"]]
    return {"lrs": len(others), "train_tokens": sum(v["train"]["tokens"] for v in others),
            "select_tokens": sum(v["validation"]["tokens"] for v in others),
            "seconds": sum(v["train"]["wall_s"] + v["validation"]["seconds"] for v in others)}


def _seed_files(plan: ComparePlan, seed_dir: Path, entry: dict) -> None:
    """The seed's equal-compute plan, scale fits and chosen prompts, where its arms wrote them."""
    path = seed_dir / (plan.equal_arm or "") / EQUAL_FILE
    if plan.equal_arm and path.is_file():  # how many steps equal compute took, and whether they were capped
        entry["equal_compute"] = read_json(path, "re-run the equal-compute arm")
    fits = {arm: seed_dir / arm / "scale_fit.json" for arm in plan.scale_fit_arms}
    fits = {arm: read_json(f, "hyper-es analyze scale-fit RUN --out RUN") for arm, f in fits.items() if f.is_file()}
    if fits:  # the Hyper-ES update as s × the final GRPO update + a rest
        entry["scale_fit"] = fits
    main = plan.rows["base"][0] if "base" in plan.rows else None
    adapters = given_adapters_cost(seed_dir / main) if main else None
    if adapters:  # given adapters this toolkit trained before the run: no row is charged them, shown beside
        entry["adapters_trained"] = adapters
    chosen = {label: prompt_file(seed_dir / plan.rows[label][0], plan.rows[label][1]) for label in plan.prompted}
    chosen = {label: read_json(f, "re-run that arm") for label, f in chosen.items() if f.is_file()}
    if chosen:  # the chosen prompts (co-evolved, or a prompt control's), chosen on validation, in full
        entry["prompts"] = chosen


def given_adapters_cost(run_dir: Path) -> dict | None:
    """The given adapters' own training (their manifests, recorded when they were imported): {"adapters", steps,
    tokens, seconds}, or None when no given adapter says what it cost."""
    from hyper_es.directions.manifest import finished_jobs

    trained = [m["imported"]["trained"] for _, m in finished_jobs(run_dir) if (m.get("imported") or {}).get("trained")]
    if not trained:
        return None
    return {"adapters": len(trained), "steps": sum(t["optimizer_steps"] or 0 for t in trained),
            "tokens": sum(t["tokens"] or 0 for t in trained), "seconds": sum(t["wall_seconds"] or 0.0 for t in trained)}


def _seed(plan: ComparePlan, seed: int, seed_dir: Path, strata: dict, values: _Values) -> dict | None:
    rows = resolve(plan, seed_dir)
    if "base" not in rows:
        return None
    trained = rows["base"]["trained"]
    transfer = [t for t in rows["base"]["tasks"] if t == plan.transfer]
    grid = grid_cost(seed_dir) if plan.tuned else None
    entry = {"rows": {label: row_entry(r, trained, grid if label in plan.tuned else None)
                      for label, r in rows.items()}, "vs": {}}
    _seed_files(plan, seed_dir, entry)
    for m, c in plan.all_pairs():
        if m not in rows or c not in rows:
            continue
        key = f"{m} - {c}"
        for group, tasks, metric in (("trained", trained, "greedy"), (plan.transfer, transfer, "greedy"),
                                     *((k, trained, k) for k in plan.pass_k)):
            if not tasks or (metric != "greedy" and not (_sampled(rows[m], metric) and _sampled(rows[c], metric))):
                continue
            st = _strata(values, rows[m], rows[c], tasks, metric, f"seed {seed} {key}")
            entry["vs"].setdefault(key, {})[group] = stats.paired_bootstrap(st).to_dict()
            strata.setdefault(key, {}).setdefault(group, {})[seed] = st
            if group == "trained":
                for t, s in zip(tasks, st):
                    entry["vs"][key][t] = stats.paired_bootstrap([s]).to_dict()
    return entry


def summarize(plan: ComparePlan, root: Path, seeds: list[int] | None = None) -> dict:
    per, strata, folders, values = {}, {}, seed_dirs(root, seeds), _Values()
    for seed, folder in folders.items():
        entry = _seed(plan, seed, folder, strata, values)
        if entry is not None:
            per[seed] = entry
    pooled = {}
    for key, groups in strata.items():
        for group, by_seed in groups.items():
            diffs = [per[s]["vs"][key][group]["diff"] for s in by_seed]
            lows = [per[s]["vs"][key][group]["low"] for s in by_seed]
            pooled.setdefault(key, {})[group] = {
                **stats.paired_bootstrap([x for st in by_seed.values() for x in st]).to_dict(),
                "seeds": sorted(by_seed), "seed_mean": sum(diffs) / len(diffs), "seed_min": min(diffs),
                "seed_max": max(diffs), "seeds_ahead": sum(d > 0 for d in diffs),
                "seeds_ci_above_0": sum(lo > 0 for lo in lows)}
    return {"seeds": per, "pooled": pooled, "goal": {m: goal(plan, per, pooled, m, list(folders)) for m in plan.methods},
            "pooling": POOLING, "B": stats.B_DEFAULT, "seed": stats.SEED_DEFAULT}


def goal(plan: ComparePlan, per: dict, pooled: dict, method: str, seeds: list[int]) -> dict:
    """The plan's goal against the strongest control (the highest pooled trained-task accuracy): at least
    `goal.points` pooled with its CI above 0, ahead in `goal.seeds_ahead` seeds, at most `goal.steps_ratio` of the
    baseline's steps (where the plan sets one), and no loss on the transfer task beyond its CI."""
    g = plan.goal
    have = [c for c in plan.controls if (pooled.get(f"{method} - {c}") or {}).get("trained")]
    if not have:
        return {"status": "incomplete", "why": f"no control is paired with {method} yet"}
    strongest = max(have, key=lambda c: pooled[f"{method} - {c}"]["trained"]["b"])
    d, t = pooled[f"{method} - {strongest}"]["trained"], pooled[f"{method} - {strongest}"].get(plan.transfer)
    ratio = max((e["rows"][method]["steps"] / e["rows"][plan.baseline]["steps"] for e in per.values()
                 if method in e["rows"] and plan.baseline in e["rows"]), default=None)
    checks = {"at_least_goal_points": d["diff"] >= g.points / 100, "ci_low_above_0": d["low"] > 0,
              "ahead_in_goal_seeds": d["seeds_ahead"] >= g.seeds_ahead,
              **({"steps_within_goal_ratio": ratio is not None and ratio <= g.steps_ratio}
                 if g.steps_ratio is not None else {}),
              "transfer_no_loss_beyond_ci": t is None or t["high"] >= 0}
    complete = len(d["seeds"]) == len(seeds) and set(have) == set(plan.controls)
    return {"strongest_control": strongest, "controls_paired": have, "seeds": d["seeds"],
            "diff_points": round(100 * d["diff"], 2), "ci": [round(100 * d["low"], 2), round(100 * d["high"], 2)],
            "seeds_ahead": d["seeds_ahead"], "seeds_ci_above_0": d["seeds_ci_above_0"],
            "steps_ratio_max": ratio, **checks,
            "status": ("reached" if all(checks.values()) else "not reached") if complete else "incomplete"}


def partial(plan: ComparePlan, root: Path, seeds: list[int] | None = None) -> dict:
    """{seed: {arm: ...}} for each of the plan's `partial_arms` still evaluating (no report.json yet): each evaluated
    row's greedy test accuracy, and hyper-es minus every other evaluated row, paired (trained tasks pooled; the
    transfer task apart). No costs and no goal: not the decision."""
    out, values = {}, _Values()
    for seed, seed_dir in seed_dirs(root, seeds).items():
        for arm in plan.partial_arms:
            folder = seed_dir / arm
            if (folder / REPORT_FILE).is_file() or not (folder / EVAL_DIR / "hyper-es.json").is_file():
                continue
            rows = {p.stem: read_json(p, "re-run the arm") for p in sorted((folder / EVAL_DIR).glob("*.json"))}
            tasks = list(rows["hyper-es"]["results"])
            trained = [t for t in tasks if t != plan.transfer]
            entry = {"rows": {n: {t: r["results"][t]["greedy"] for t in tasks if t in r["results"]}
                              for n, r in rows.items()}, "vs": {}}
            for other in (n for n in rows if n != "hyper-es"):
                for group, ts in (("trained", trained), (plan.transfer, [t for t in tasks if t == plan.transfer])):
                    if ts:
                        st = [stats.align(*values(folder, "hyper-es", t), *values(folder, other, t),
                                          what=f"seed {seed} hyper-es - {other} {t}") for t in ts]
                        entry["vs"].setdefault(other, {})[group] = stats.paired_bootstrap(st).to_dict()
            out.setdefault(seed, {})[arm] = entry
    return out
