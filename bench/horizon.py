"""The horizon study (issue 45): Hyper-ES, full-parameter ES and GRPO-LoRA on one shipped environment's episodes at
several horizons, each horizon one `hyper-es compare`, and how each method's gain over the base changes with it.

    python bench/horizon.py --root ROOT --horizons 1 2 4 --seeds 0 1 2 [--recipe recipes/smollm2-135m-guess.yaml]
    python bench/horizon.py --root ROOT --horizons 1 2 4 --summary-only [--out bench/results/horizon]

ROOT/h<H>/ is a comparison (`hyper-es report ROOT/h<H>` renders it alone) of the recipe with every split at horizon
H, `max_turns` H + 1 and `max_tokens` (H + 1) × `turn_tokens`; it resumes by stage. The study's table: per horizon and
method (the compare plan's methods and controls), the pooled held-out success minus the base's with its paired 95%
CI, the seed-level spread, and the row's generated tokens (mean over seeds); and per method, its success minus
GRPO-LoRA's at equal tokens (`grpo-equal-compute`) at each horizon and that gap's change from the shortest horizon
(`trend`), the claim that ES degrades more slowly than RL as the horizon grows. Written to OUT/horizon.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def horizon_recipe(path: Path, horizon: int):
    """The recipe at `horizon`: every environment split's horizon, and turns and tokens to match."""
    import hyper_es as hx
    from hyper_es.recipe import recipe_from_dict

    data = hx.load_recipe(path).model_dump(mode="json")
    for task in data["tasks"]:
        if task.get("environment"):
            env = task["environment"]
            env.update(max_turns=horizon + 1, max_tokens=(horizon + 1) * env["turn_tokens"])
            for split in ("train", "val", "test"):
                if task.get(split) and task[split]["source"] == "environment":
                    task[split]["horizon"] = horizon
    data["name"] = f"{data['name']}-h{horizon}"
    return recipe_from_dict(data, path)


def studied(root: Path, horizons: list[int]) -> dict:
    """{horizon: (its comparison's summary, its plan)} for each horizon summarised so far."""
    from hyper_es.compare.plan import read_plan

    return {h: (json.loads((root / f"h{h}" / "summary.json").read_text()), read_plan(root / f"h{h}"))
            for h in horizons if (root / f"h{h}" / "summary.json").is_file()}


def table(found: dict, horizons: list[int]) -> tuple[dict, str]:
    """Per horizon and method: the pooled success minus the base's (paired 95% CI), the seed spread, tokens."""
    out, lines = {}, ["| horizon | row | success | − base | 95% CI | seeds (min..max) | tokens |",
                      "|---|---|---|---|---|---|---|"]
    for h in horizons:
        if h not in found:
            lines.append(f"| {h} | (not run) | | | | | |")
            continue
        summary, plan = found[h]
        out[h] = {}
        for label in [*plan.methods, *plan.controls, "baseline"]:
            d = (summary["pooled"].get(f"{label} - base") or {}).get("trained")
            per = [e["rows"][label] for e in summary["seeds"].values() if label in e["rows"]]
            if d is None or not per:
                continue
            tokens = sum(r["tokens"] for r in per) / len(per)
            out[h][label] = {**d, "tokens_mean": tokens}
            lines.append(f"| {h} | {label} | {d['a']:.3f} | {100 * d['diff']:+.1f} | [{100 * d['low']:+.1f}, "
                         f"{100 * d['high']:+.1f}] | {100 * d['seed_min']:+.1f}..{100 * d['seed_max']:+.1f} "
                         f"({len(d['seeds'])}) | {tokens:,.0f} |")
    return out, "\n".join(lines) + "\n"


GRPO = "grpo-equal-compute"  # GRPO-LoRA at the Hyper-ES row's generated tokens (ES's budget too): the reference
Z = 1.959964


def trend(found: dict) -> tuple[dict, str]:
    """Agentic ESOpt's claim as a number: per method, its held-out success minus GRPO-LoRA's at equal tokens at each
    horizon (pooled over seeds, paired 95% CI), and that gap's change from the shortest horizon run, d_H - d_first,
    with a 95% CI taking the two horizons' bootstrap CIs as independent normal estimates (their episodes are scored
    apart; where they share questions, a positive correlation only makes this CI wider than it need be)."""
    gaps: dict[str, dict[int, dict]] = {}
    for h, (summary, plan) in sorted(found.items()):
        for m in plan.methods:
            d = (summary["pooled"].get(f"{m} - {GRPO}") or {}).get("trained")
            if d is not None:
                gaps.setdefault(m, {})[h] = d
    out, lines = {}, [f"| row | horizon | − {GRPO} | 95% CI | change from the first horizon | 95% CI |",
                      "|---|---|---|---|---|---|"]
    for m, by_h in gaps.items():
        h0 = min(by_h)
        for h, d in sorted(by_h.items()):
            change = d["diff"] - by_h[h0]["diff"]
            half = Z * (se(d) ** 2 + se(by_h[h0]) ** 2) ** 0.5 if h != h0 else 0.0
            out.setdefault(m, {})[h] = {"diff": d["diff"], "low": d["low"], "high": d["high"], "change": change,
                                        "change_low": change - half, "change_high": change + half}
            shown = (f"{100 * change:+.1f} | [{100 * (change - half):+.1f}, {100 * (change + half):+.1f}]"
                     if h != h0 else "(reference) | ")
            lines.append(f"| {m} | {h} | {100 * d['diff']:+.1f} | [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] "
                         f"| {shown} |")
    return out, "\n".join(lines) + "\n"


def se(d: dict) -> float:
    """A paired difference's standard error, read back from its 95% CI."""
    return (d["high"] - d["low"]) / (2 * Z)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "smollm2-135m-guess.yaml")
    ap.add_argument("--horizons", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--out", type=Path, help="where horizon.json and horizon.md go (default: ROOT)")
    args = ap.parse_args()

    if not args.summary_only:
        from hyper_es.compare.run import compare

        for h in args.horizons:
            compare(horizon_recipe(args.recipe, h), args.seeds, args.root / f"h{h}", figure=False)
    found = studied(args.root, args.horizons)
    data, text = table(found, args.horizons)
    gaps, gap_text = trend(found)
    out = args.out or args.root
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "bench/horizon.py", *sys.argv[1:]])
    (out / "horizon.json").write_text(json.dumps({"command": command, "horizons": data, "against_grpo": gaps},
                                                 indent=1) + "\n")
    (out / "horizon.md").write_text(f"Command: `{command}`\n\n{text}\n{gap_text}")
    print(text, gap_text, sep="\n", end="")


if __name__ == "__main__":
    main()
