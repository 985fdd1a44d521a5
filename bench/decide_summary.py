"""The re-decision's summary from the artefacts bench/decide.py copies (bench/results/decide2/seed<N>/<stage>/):
every Hyper-ES row minus every control, greedy test accuracy, paired bootstrap 95% CIs per seed and pooled over
seeds (problems resampled within seed × task), the seed-level mean and range, cost, the goal, and the figures.

    python bench/decide.py --summary-only          # writes summary.json, summary.md, accuracy_cost.png
"""

from __future__ import annotations

import json
from pathlib import Path

from hyper_es.evaluate import stats
from hyper_es.evaluate.final import row_values
from hyper_es.io import read_json, write_json_atomic
from hyper_es.rows import prompt_file

BEST = None  # the stage's baseline_best (the best candidate by validation, the base as step 0)
ROWS = {  # label -> (stage, row name in that stage's run folder)
    "base": ("main", "base"),
    "baseline": ("main", "baseline"),
    "baseline-best": ("main", BEST),
    "scaled": ("main", "scaled"),
    "grpo-equal-compute": ("equal", BEST),
    "hyper-es": ("main", "hyper-es"),
    "hyper-es-difficulty": ("difficulty", "hyper-es"),
    "hyper-es-start": ("main", "search-start"),  # the search's start (the scanned scale of x0), not searched
    "hyper-es-difficulty-start": ("difficulty", "search-start"),
    "prompt-only": ("coevolve-prompt", "hyper-es+prompt"),  # issue 22: x0 with a co-evolved prompt
    "coevolution": ("coevolve-both", "hyper-es+prompt"),  # co-evolved coefficients with their prompt
    "coevolution-own-prompt": ("coevolve-both", "hyper-es"),  # the same coefficients, the tasks' own prompts
    "scaled+prompt": ("controls", "scaled+prompt"),  # scaled with the best one-gene prompt by validation
}
PROMPTED = ("prompt-only", "coevolution", "scaled+prompt")  # rows with a chosen prompt (rows.prompt_file)
CONTROLS = ("baseline-best", "scaled", "grpo-equal-compute")
METHODS = ("hyper-es", "hyper-es-difficulty")
REFS = (*CONTROLS, "baseline", "base")
# Co-evolution at the parameter-only search's scorings: each arm against the base and against each other.
# Then what each arm adds over the start it searched from, and each arm against the strongest controls.
COEVOLVE_PAIRS = (("coevolution", "hyper-es"), ("coevolution", "prompt-only"), ("prompt-only", "hyper-es"),
                  ("coevolution", "coevolution-own-prompt"), ("coevolution", "base"), ("prompt-only", "base"),
                  *((arm, ref) for arm in ("coevolution", "prompt-only")
                    for ref in ("hyper-es-start", "scaled", "scaled+prompt", "grpo-equal-compute")),
                  ("scaled+prompt", "scaled"), ("hyper-es", "scaled+prompt"))
# What the search adds over its start, and whether its start alone (directions + one scanned scale) is enough.
ABLATIONS = (*((m, f"{m}-start") for m in METHODS), *((f"{m}-start", c) for m in METHODS for c in CONTROLS))
# What more compute per step buys the baseline, against its tuned early stop (a control against a control).
CONTROL_PAIRS = (("grpo-equal-compute", "baseline-best"),)
PAIRS = (*((m, c) for m in METHODS for c in REFS), *ABLATIONS, *CONTROL_PAIRS, *COEVOLVE_PAIRS)
PASS_K = ("pass@1", "pass@8")
TRANSFER = "gsm8k"


def _report(folder: Path) -> dict | None:
    path = folder / "report.json"
    return read_json(path, "re-run that stage of bench/decide.py") if path.is_file() else None


def resolve(seed_dir: Path) -> dict[str, dict]:
    """label -> {"folder", "row" (the report row), "trained"} for every row whose stage has finished."""
    out = {}
    for label, (stage, name) in ROWS.items():
        report = _report(seed_dir / stage)
        if report is None:
            continue
        row = next((r for r in report["rows"] if r["name"] == (name or (report.get("baseline_best") or {}).get("name"))),
                   None)
        if row is not None and name is BEST:
            row = early_stop_cost(seed_dir / stage, row)
        if row is not None:
            out[label] = {"folder": seed_dir / stage, "row": row, "trained": report["paired"]["pooled"].get(
                "trained", []), "tasks": report["tasks"]}
    return out


def early_stop_cost(folder: Path, row: dict) -> dict:
    """The best candidate by validation as an early stop: the baseline run up to its step (pro rata) and the scoring
    of every candidate that was scored to choose it, whichever it is (the final adapter or the base included)."""
    from hyper_es.report import selection_costs
    from hyper_es.rows.kinds import KINDS

    steps, sel = row["optimizer_steps"], selection_costs(folder, [])
    _, tokens, _, select, wall = (KINDS["baseline-snapshot"].cost(folder, {"steps": steps}, {"val": sel}) if steps
                                  else (0, 0, 0, sel["baseline"], sel["baseline_s"]))
    return {**row, "train_tokens": tokens, "search_tokens": 0, "select_tokens": select,
            "tokens": None if tokens is None else tokens + select, "wall_s": wall}


def _strata(a: dict, b: dict, tasks: list[str], metric: str, what: str) -> list:
    return [stats.align(*row_values(a["folder"], a["row"]["name"], t, metric),
                        *row_values(b["folder"], b["row"]["name"], t, metric), what=f"{what} {t}") for t in tasks]


def summarize(results: Path, seeds: list[int]) -> dict:
    per, strata = {}, {}
    for seed in seeds:
        rows = resolve(results / f"seed{seed}")
        if "base" not in rows:
            continue
        trained = rows["base"]["trained"]
        transfer = [t for t in rows["base"]["tasks"] if t == TRANSFER]
        entry = {"rows": {label: _row_entry(r, trained) for label, r in rows.items()}, "vs": {}}
        plan = results / f"seed{seed}" / "equal" / "equal_compute.json"
        if plan.is_file():  # how many steps equal compute took, and whether they were capped
            entry["equal_compute"] = read_json(plan, "re-run the equal stage")
        fits = {st: results / f"seed{seed}" / st / "scale_fit.json" for st in ("main", "difficulty")}
        fits = {st: read_json(f, "hyper-es analyze scale-fit RUN --out RUN") for st, f in fits.items() if f.is_file()}
        if fits:  # the Hyper-ES update as s × the final GRPO update + a rest
            entry["scale_fit"] = fits
        chosen = {label: prompt_file(results / f"seed{seed}" / ROWS[label][0], ROWS[label][1]) for label in PROMPTED}
        chosen = {label: read_json(f, "re-run that stage") for label, f in chosen.items() if f.is_file()}
        if chosen:  # the chosen prompts (co-evolved, or a prompt control's), chosen on validation, in full
            entry["prompts"] = chosen
        for m, c in PAIRS:
            if m not in rows or c not in rows:
                continue
            key = f"{m} - {c}"
            for group, tasks, metric in (("trained", trained, "greedy"), (TRANSFER, transfer, "greedy"),
                                         *((k, trained, k) for k in PASS_K)):
                if not tasks or (metric != "greedy" and not (_sampled(rows[m]) and _sampled(rows[c]))):
                    continue
                st = _strata(rows[m], rows[c], tasks, metric, f"seed {seed} {key}")
                entry["vs"].setdefault(key, {})[group] = stats.paired_bootstrap(st).to_dict()
                strata.setdefault(key, {}).setdefault(group, {})[seed] = st
                if group == "trained":
                    for t, s in zip(tasks, st):
                        entry["vs"][key][t] = stats.paired_bootstrap([s]).to_dict()
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
    return {"seeds": per, "pooled": pooled, "goal": {m: goal(per, pooled, m, seeds) for m in METHODS},
            "pooling": "mean over seed × task strata, equal weights; problems resampled within each stratum",
            "B": stats.B_DEFAULT, "seed": stats.SEED_DEFAULT}


def partial(results: Path, seeds: list[int], stages: tuple[str, ...] = ("main", "difficulty")) -> dict:
    """{seed: {stage: ...}} for each stage still evaluating (no report.json yet): each evaluated row's greedy test
    accuracy, and hyper-es minus every other evaluated row, paired (trained tasks pooled; GSM8K apart). No costs and
    no goal: not the decision."""
    out = {}
    for seed, stage in ((seed, stage) for seed in seeds for stage in stages):
        folder = results / f"seed{seed}" / stage
        if _report(folder) is not None or not (folder / "eval" / "hyper-es.json").is_file():
            continue
        rows = {p.stem: read_json(p, "re-run the stage") for p in sorted((folder / "eval").glob("*.json"))}
        tasks = list(rows["hyper-es"]["results"])
        trained = [t for t in tasks if t != TRANSFER]
        entry = {"rows": {n: {t: r["results"][t]["greedy"] for t in tasks if t in r["results"]}
                          for n, r in rows.items()}, "vs": {}}
        for other in (n for n in rows if n != "hyper-es"):
            for group, ts in (("trained", trained), (TRANSFER, [t for t in tasks if t == TRANSFER])):
                if ts:
                    st = [stats.align(*row_values(folder, "hyper-es", t), *row_values(folder, other, t),
                                      what=f"seed {seed} hyper-es - {other} {t}") for t in ts]
                    entry["vs"].setdefault(other, {})[group] = stats.paired_bootstrap(st).to_dict()
        out.setdefault(seed, {})[stage] = entry
    return out


def _partial_markdown(part: dict) -> list[str]:
    lines = []
    for seed, stage, entry in ((seed, stage, e) for seed, by_stage in part.items() for stage, e in by_stage.items()):
        tasks = list(entry["rows"]["hyper-es"])
        lines += ["", f"Seed {seed}, {stage} stage still evaluating: the rows evaluated so far (greedy test accuracy; no "
                      f"costs, no goal: not the decision):", "", "| row | " + " | ".join(tasks) + " |",
                  "|---|" + "---|" * len(tasks)]
        lines += [f"| {n} | " + " | ".join(f"{acc.get(t, float('nan')):.3f}" for t in tasks) + " |"
                  for n, acc in entry["rows"].items()]
        lines += ["", "| hyper-es minus | trained tasks pooled | gsm8k |", "|---|---|---|"]
        lines += [f"| {n} | {_fmt(g.get('trained'))} | {_fmt(g.get(TRANSFER))} |" for n, g in entry["vs"].items()]
    return lines


def _prompts_markdown(seeds: dict) -> list[str]:
    """Each co-evolved prompt as it is served (its stage's search/prompt.json, `exported`): per task the system turn,
    the few-shot turns and the user turn, with {question} (each template field) where the row's goes."""
    lines = []
    for seed, label, saved in ((s, label, p) for s, e in seeds.items() for label, p in e.get("prompts", {}).items()):
        for task, ex in (saved.get("exported") or {}).items():
            turns = ([("system", ex["system"])] if ex["system"] else []) + [
                t for shot in ex["shots"] for t in (("user", shot["user"]), ("assistant", shot["assistant"]))]
            turns.append(("user", ex["template"].format_map(_Fields())))
            lines += ["", f"Seed {seed}, {label}, task {task} (genes {json.dumps(saved['genes'][task])}):", "", "```"]
            lines += [f"[{role}] {text}" for role, text in turns] + ["```"]
    return (["", "The chosen prompts (co-evolved, or the prompt control's one-gene choice), chosen on validation, as "
             "they are served (`hyper-es export` writes them to prompt.json):"] + lines) if lines else []


class _Fields(dict):
    """A template's fields left as {name} when it is shown."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _sampled(r: dict) -> bool:
    return any("pass@1" in res for res in r["row"]["results"].values())


def _row_entry(r: dict, trained: list[str]) -> dict:
    row = r["row"]
    greedy = {t: res["greedy"] for t, res in row["results"].items()}
    return {"name": row["name"], "steps": row["optimizer_steps"], "train_tokens": row["train_tokens"],
            "search_tokens": row["search_tokens"], "select_tokens": row["select_tokens"], "tokens": row["tokens"],
            "wall_s": row["wall_s"], "greedy": greedy,
            "trained": sum(greedy[t] for t in trained) / len(trained) if trained else None,
            "val": (row.get("val") or {}).get("mean")}


def goal(per: dict, pooled: dict, method: str, seeds: list[int]) -> dict:
    """≥ the strongest control + 1 point pooled, CI above 0, ahead in ≥ 2 of 3 seeds, ≤ 90% of the baseline's
    steps, no GSM8K loss beyond its CI. The strongest control: the highest pooled trained-task accuracy."""
    have = [c for c in CONTROLS if (pooled.get(f"{method} - {c}") or {}).get("trained")]
    if not have:
        return {"status": "incomplete", "why": f"no control is paired with {method} yet"}
    strongest = max(have, key=lambda c: pooled[f"{method} - {c}"]["trained"]["b"])
    d, t = pooled[f"{method} - {strongest}"]["trained"], pooled[f"{method} - {strongest}"].get(TRANSFER)
    ratio = max((e["rows"][method]["steps"] / e["rows"]["baseline"]["steps"] for e in per.values()
                 if method in e["rows"] and "baseline" in e["rows"]), default=None)
    checks = {"at_least_1_point": d["diff"] >= 0.01, "ci_low_above_0": d["low"] > 0,
              "ahead_in_2_of_3_seeds": d["seeds_ahead"] >= 2, "steps_at_most_90pct": ratio is not None and ratio <= 0.9,
              "gsm8k_no_loss_beyond_ci": t is None or t["high"] >= 0}
    complete = len(d["seeds"]) == len(seeds) and set(have) == set(CONTROLS)
    return {"strongest_control": strongest, "controls_paired": have, "seeds": d["seeds"],
            "diff_points": round(100 * d["diff"], 2), "ci": [round(100 * d["low"], 2), round(100 * d["high"], 2)],
            "seeds_ahead": d["seeds_ahead"], "seeds_ci_above_0": d["seeds_ci_above_0"],
            "steps_ratio_max": ratio, **checks,
            "status": ("reached" if all(checks.values()) else "not reached") if complete else "incomplete"}


def _fmt(d: dict | None) -> str:
    return "—" if d is None else f"{100 * d['diff']:+.1f} [{100 * d['low']:.1f}, {100 * d['high']:.1f}]"


def markdown(summary: dict, results: Path) -> str:
    lines = ["# Re-decision: Hyper-ES against the strongest simple controls (SmolLM2-135M, leak-free splits)", "",
             "Greedy test accuracy and what each row cost (generated tokens: train = GRPO completions and the "
             "difficulty measurement, search = fitness, select = validation scorings to choose it):", "",
             "| seed | row | adapter | steps | train | search | select | total tokens | wall s | val | trained tasks "
             "| gsm8k |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for seed, e in summary["seeds"].items():
        for label, r in e["rows"].items():
            val = "—" if r["val"] is None else f"{r['val']:.3f}"
            lines.append(f"| {seed} | {label} | {r['name']} | {r['steps']} | {_n(r['train_tokens'])} | "
                         f"{_n(r['search_tokens'])} | {_n(r['select_tokens'])} | {_n(r['tokens'])} | "
                         f"{_n(r['wall_s'])} | {val} | {r['trained']:.4f} | "
                         f"{r['greedy'].get(TRANSFER, float('nan')):.2f} |")
    for seed, e in summary["seeds"].items():
        plan = e.get("equal_compute")
        if plan:
            wall = (f"; Hyper-ES's {plan['budget_s']:,.0f} s of wall time are {plan['equal_wall_steps']} batches at "
                    f"{plan['baseline_s_per_step']:.0f} s a batch") if "budget_s" in plan else ""
            lines.append(f"\nSeed {seed}: grpo-equal-compute trained {plan['steps']} steps of "
                         f"{plan.get('accumulation', 1)} accumulated batches each (budget: "
                         f"{plan.get('budget', 'tokens')}). Hyper-ES's {plan['budget_tokens']:,} generated tokens are "
                         f"{plan['equal_steps']} batches at the baseline's {plan['baseline_tokens_per_step']:.0f} "
                         f"tokens a batch{wall}"
                         + ("; **fewer batches than equal tokens, so less than equal token compute**"
                            if plan["capped"] else "") + ".")
    fits = [(seed, st, f) for seed, e in summary["seeds"].items() for st, f in e.get("scale_fit", {}).items()]
    if fits:
        lines += ["", "Each Hyper-ES update as s × the final GRPO update + a rest (`hyper-es analyze scale-fit`): the "
                  "rest is what the layer-wise search adds beyond one scale:", "",
                  "| seed | stage | s | cosine | share of ‖ΔW‖² no scale explains | s per block |", "|---|---|---|---|---|---|"]
        for seed, st, f in fits:
            r = f["rows"]["hyper-es"]
            blocks = ", ".join(f"{b} {v['scale']:.2f}" for b, v in r["blocks"].items() if v["scale"] is not None)
            lines.append(f"| {seed} | {st} | {r['scale']:.3f} | {r['cosine']:.3f} | {r['unexplained']:.1%} | {blocks} |")
    lines += ["", "Differences, greedy, points, paired bootstrap 95% CI (trained tasks pooled; per seed, then pooled "
              "over seeds with the seed-level mean [min, max]):", "",
              "| comparison | " + " | ".join(f"seed {s}" for s in summary["seeds"]) + " | pooled | seed mean [min, max] "
              "| gsm8k pooled |", "|---|" + "---|" * (len(summary["seeds"]) + 3)]
    for key, groups in summary["pooled"].items():
        if "trained" not in groups:
            continue
        p = groups["trained"]
        cells = [_fmt(summary["seeds"][s]["vs"].get(key, {}).get("trained")) for s in summary["seeds"]]
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {_fmt(p)} | {100 * p['seed_mean']:+.1f} "
                     f"[{100 * p['seed_min']:+.1f}, {100 * p['seed_max']:+.1f}] | {_fmt(groups.get(TRANSFER))} |")
    sampled = [(k, g) for k, g in summary["pooled"].items() if any(m in g for m in PASS_K)]
    if sampled:
        lines += ["", "Pass@k (n = 8, T = 1, the first 200 test problems of each trained task, per-problem seeds), "
                  "pooled over seeds, points:", "", "| comparison | pass@1 | pass@8 |", "|---|---|---|"]
        lines += [f"| {k} | {_fmt(g.get('pass@1'))} | {_fmt(g.get('pass@8'))} |" for k, g in sampled]
    lines += ["", "Goal: ≥ the strongest control + 1 point pooled, CI above 0, ahead in ≥ 2 of 3 seeds (by point "
              "estimate; `seeds_ci_above_0` counts the seeds whose own CI is above 0), ≤ 90% of the baseline's steps, "
              "no GSM8K loss beyond its CI:"]
    lines += [f"- {m}: **{g['status']}** ({json.dumps({k: v for k, v in g.items() if k != 'status'})})"
              for m, g in summary["goal"].items()]
    lines += _prompts_markdown(summary["seeds"])
    if (results / "accuracy_cost.png").is_file():
        lines += ["", "![accuracy against generated tokens and wall time](accuracy_cost.png)"]
    lines += _partial_markdown(summary.get("partial") or {})
    return "\n".join(lines) + "\n"


def _n(v) -> str:
    return "—" if v is None else f"{v:,.0f}"


def curves(seed_dir: Path, stage: str) -> list[tuple[int, float, float]]:
    """(generated training tokens, wall s, validation accuracy) of every candidate of a stage's GRPO run."""
    folder = seed_dir / stage
    manifest = folder / "directions" / "baseline" / "manifest.json"
    if not manifest.is_file():
        return []
    m = read_json(manifest, "")
    tokens = dict(map(tuple, m.get("token_curve") or []))
    out = []
    for f in sorted((folder / "eval" / "val").glob("baseline*.json")):
        step = m["optimizer_steps"] if f.stem == "baseline" else int(f.stem.partition("@")[2])
        if step in tokens:
            out.append((tokens[step], m["wall_seconds"] * step / m["optimizer_steps"], read_json(f, "")["mean"]))
    return sorted(out)


def figure(summary: dict, results: Path) -> Path | None:
    """Test accuracy (trained tasks) against total generated tokens and wall time per row and seed, and the
    GRPO-LoRA runs' candidates on validation beside them."""
    if not summary["seeds"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    colors = {label: f"C{i}" for i, label in enumerate(ROWS)}
    markers = "osD^v"
    for i, (seed, e) in enumerate(summary["seeds"].items()):
        for label, r in e["rows"].items():
            for ax, x in ((axes[0][0], r["tokens"]), (axes[0][1], r["wall_s"])):
                if x:
                    ax.scatter(x, r["trained"], color=colors[label], marker=markers[i % 5],
                               label=label if i == 0 else None)
        for stage, style in (("main", "-"), ("equal", "--")):
            pts = curves(results / f"seed{seed}", stage)
            for ax, k in ((axes[1][0], 0), (axes[1][1], 1)):
                if pts:
                    ax.plot([p[k] for p in pts], [p[2] for p in pts], style, color=f"C{i}", marker=".",
                            label=f"seed {seed} {'baseline' if stage == 'main' else 'grpo-equal-compute'}")
    shapes = {"o": "circle", "s": "square", "D": "diamond", "^": "triangle", "v": "triangle down"}
    key = ", ".join(f"{shapes[markers[i % 5]]} seed {s}" for i, s in enumerate(summary["seeds"]))
    titles = [[f"test, trained tasks: accuracy vs generated tokens\n({key})", f"test: accuracy vs wall seconds\n({key})"],
              ["GRPO-LoRA candidates, validation: vs generated tokens", "validation: vs wall seconds"]]
    for r in range(2):
        for c in range(2):
            ax = axes[r][c]
            ax.set_title(titles[r][c], fontsize=10)
            ax.set_xscale("log")
            ax.set_xlabel("generated tokens" if c == 0 else "wall seconds")
            ax.set_ylabel("greedy accuracy")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.tight_layout()
    path = results / "accuracy_cost.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_summary(results: Path, seeds: list[int]) -> dict:
    summary = summarize(results, seeds)
    summary["partial"] = partial(results, seeds)
    figure(summary, results)
    write_json_atomic(results / "summary.json", summary)
    (results / "summary.md").write_text(markdown(summary, results))
    print(markdown(summary, results))
    return summary
