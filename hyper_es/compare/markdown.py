"""A comparison's summary.md: the rows and their costs, the equal-compute plans, the scale fits, every pair's
differences per seed and pooled with the seed-level range, Pass@k, the goal and the chosen prompts."""

from __future__ import annotations

import json
from pathlib import Path

from hyper_es.compare.plan import ComparePlan
from hyper_es.report.markdown import fmt_diff as _fmt
from hyper_es.rundir import FIGURE_FILE


def _n(v) -> str:
    return "—" if v is None else f"{v:,.0f}"


def _rows(plan: ComparePlan, summary: dict) -> list[str]:
    lines = [f"# {plan.title}", "",
             "Greedy test accuracy and what each row cost (generated tokens: train = GRPO completions and the "
             "difficulty measurement, search = fitness, select = validation scorings to choose it):", "",
             "| seed | row | adapter | steps | train | search | select | total tokens | wall s | val | trained tasks |"
             + (f" {plan.transfer} |" if plan.transfer else ""), "|---|---|---|---|---|---|---|---|---|---|---|"
             + ("---|" if plan.transfer else "")]
    for seed, e in summary["seeds"].items():
        for label, r in e["rows"].items():
            val = "—" if r["val"] is None else f"{r['val']:.3f}"
            lines.append(f"| {seed} | {label} | {r['name']} | {r['steps']} | {_n(r['train_tokens'])} | "
                         f"{_n(r['search_tokens'])} | {_n(r['select_tokens'])} | {_n(r['tokens'])} | "
                         f"{_n(r['wall_s'])} | {val} | {r['trained']:.4f} |"
                         + (f" {r['greedy'].get(plan.transfer, float('nan')):.2f} |" if plan.transfer else ""))
    grids = {seed: g for seed, e in summary["seeds"].items() if (g := next(
        (r["grid"] for r in e["rows"].values() if r.get("grid")), None))}
    if grids:
        lines += ["", "Each row trained at the chosen learning rate also carries the lr grid's other lrs (their "
                  "training and validation scorings): " + "; ".join(
                      f"seed {seed}: {g['lrs']} lrs, {_n(g['train_tokens'] + g['select_tokens'])} tokens, "
                      f"{_n(g['seconds'])} s" for seed, g in grids.items()) + "."]
    given = {seed: a for seed, e in summary["seeds"].items() if (a := e.get("adapters_trained"))}
    if given:
        lines += ["", "The given adapters were trained before the comparison, and no row above is charged for them. "
                  "Charged, their training adds to every row built on them (the adapters alone, their merges, the "
                  "search and its controls): " + "; ".join(
                      f"seed {seed}: {a['adapters']} adapters, {a['steps']} steps, {_n(a['tokens'])} tokens, "
                      f"{_n(a['seconds'])} s" for seed, a in given.items()) + "."]
    return lines


def _equal_plans(summary: dict) -> list[str]:
    lines = []
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
    return lines


def _scale_fits(summary: dict) -> list[str]:
    fits = [(seed, arm, f) for seed, e in summary["seeds"].items() for arm, f in e.get("scale_fit", {}).items()]
    if not fits:
        return []
    lines = ["", "Each Hyper-ES update as s × the final GRPO update + a rest (`hyper-es analyze scale-fit`): the "
             "rest is what the layer-wise search adds beyond one scale:", "",
             "| seed | stage | s | cosine | share of ‖ΔW‖² no scale explains | s per block |", "|---|---|---|---|---|---|"]
    for seed, arm, f in fits:
        r = f["rows"]["hyper-es"]
        blocks = ", ".join(f"{b} {v['scale']:.2f}" for b, v in r["blocks"].items() if v["scale"] is not None)
        lines.append(f"| {seed} | {arm} | {r['scale']:.3f} | {r['cosine']:.3f} | {r['unexplained']:.1%} | {blocks} |")
    return lines


def _differences(plan: ComparePlan, summary: dict, sampling: dict | None) -> list[str]:
    lines = ["", "Differences, greedy, points, paired bootstrap 95% CI (trained tasks pooled; per seed, then pooled "
             "over seeds with the seed-level mean [min, max]):", "",
             "| comparison | " + " | ".join(f"seed {s}" for s in summary["seeds"]) + " | pooled | seed mean [min, max] |"
             + (f" {plan.transfer} pooled |" if plan.transfer else ""),
             "|---|" + "---|" * (len(summary["seeds"]) + 2 + bool(plan.transfer))]
    for key, groups in summary["pooled"].items():
        if "trained" not in groups:
            continue
        p = groups["trained"]
        cells = [_fmt(summary["seeds"][s]["vs"].get(key, {}).get("trained")) for s in summary["seeds"]]
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {_fmt(p)} | {100 * p['seed_mean']:+.1f} "
                     f"[{100 * p['seed_min']:+.1f}, {100 * p['seed_max']:+.1f}] |"
                     + (f" {_fmt(groups.get(plan.transfer))} |" if plan.transfer else ""))
    sampled = [(k, g) for k, g in summary["pooled"].items() if any(m in g for m in plan.pass_k)]
    if sampled:
        first = f"the first {sampling['pass_k_limit']}" if sampling and sampling["pass_k_limit"] else "the"
        how = (f"n = {sampling['n']}, T = {sampling['temperature']:g}, {first} test problems of each trained task, "
               "per-problem seeds") if sampling else "sampled"
        lines += ["", f"Pass@k ({how}), pooled over the seeds on which both rows were sampled (a snapshot chosen as a "
                  "row is scored greedily only), points:", "",
                  "| comparison | " + " | ".join(plan.pass_k) + " | seeds |", "|---|" + "---|" * (len(plan.pass_k) + 1)]
        lines += [f"| {k} | " + " | ".join(_fmt(g.get(m)) for m in plan.pass_k) + " | "
                  + ", ".join(map(str, next(g[m] for m in plan.pass_k if m in g)["seeds"])) + " |" for k, g in sampled]
    return lines


def _goal(plan: ComparePlan, summary: dict, seeds: int) -> list[str]:
    g = plan.goal
    lines = ["", f"Goal: ≥ the strongest control + {g.points:g} point{'s' * (g.points != 1)} pooled, CI above 0, ahead "
             f"in ≥ {g.seeds_ahead} seeds (by point estimate; {seeds} summarised here; `seeds_ci_above_0` counts the "
             f"seeds whose own CI is above 0)"
             + (f", ≤ {g.steps_ratio:.0%} of the baseline's steps" if g.steps_ratio is not None else "")
             + (f", no {plan.transfer_label or plan.transfer} loss beyond its CI:" if plan.transfer else ":")]
    return lines + [f"- {m}: **{v['status']}** ({json.dumps({k: x for k, x in v.items() if k != 'status'})})"
                     for m, v in summary["goal"].items()]


def _prompts(seeds: dict) -> list[str]:
    """Each chosen prompt as it is served (`exported`): per task the system turn, the few-shot turns and the user
    turn, with {question} (each template field) where the row's goes."""
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


def _partial(plan: ComparePlan, part: dict) -> list[str]:
    lines = []
    for seed, arm, entry in ((seed, arm, e) for seed, by_arm in part.items() for arm, e in by_arm.items()):
        tasks = list(entry["rows"]["hyper-es"])
        lines += ["", f"Seed {seed}, {arm} stage still evaluating: the rows evaluated so far (greedy test accuracy; no "
                      f"costs, no goal: not the decision):", "", "| row | " + " | ".join(tasks) + " |",
                  "|---|" + "---|" * len(tasks)]
        lines += [f"| {n} | " + " | ".join(f"{acc.get(t, float('nan')):.3f}" for t in tasks) + " |"
                  for n, acc in entry["rows"].items()]
        t = plan.transfer
        lines += ["", "| hyper-es minus | trained tasks pooled |" + (f" {t} |" if t else ""), "|---|---|" + "---|" * bool(t)]
        lines += [f"| {n} | {_fmt(g.get('trained'))} |" + (f" {_fmt(g.get(t))} |" if t else "")
                  for n, g in entry["vs"].items()]
    return lines


def markdown(plan: ComparePlan, summary: dict, root: Path, sampling: dict | None = None,
             seeds: int | None = None) -> str:
    """summary.md. `sampling`: the arms' eval settings (n, temperature, pass_k_limit) for the Pass@k table's
    heading; `seeds`: how many seeds the comparison asked for (default: those summarized)."""
    lines = _rows(plan, summary) + _equal_plans(summary) + _scale_fits(summary)
    lines += _differences(plan, summary, sampling)
    lines += _goal(plan, summary, seeds or len(summary["seeds"])) + _prompts(summary["seeds"])
    if (Path(root) / FIGURE_FILE).is_file():
        lines += ["", f"![accuracy against generated tokens and wall time]({FIGURE_FILE})"]
    lines += _partial(plan, summary.get("partial") or {})
    return "\n".join(lines) + "\n"
