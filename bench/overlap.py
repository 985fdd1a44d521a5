"""Cross-task overlap in the re-decision's splits: chain_sum and add_sub word the same two-term expressions
differently, so a test row of one task can have its expression in the other task's train split. Counts those rows
per task and, per seed and pooled, Hyper-ES minus each control on the overlapping rows and on the rest (greedy,
paired bootstrap 95% CI), to see whether the overlap helped a row trained on both tasks.

    python bench/overlap.py [--results bench/results/decide2] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import hyper_es as hx
from hyper_es.evaluate import stats
from hyper_es.evaluate.final import row_values
from hyper_es.report.markdown import fmt_diff
from hyper_es.compare.summary import resolve
from hyper_es.tasks import get_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decide_summary import CONTROLS, PLAN  # noqa: E402

TASKS = ("chain_sum", "add_sub")
ROOT = Path(__file__).resolve().parents[1]


def overlapping(recipe) -> dict[str, set[str]]:
    """Per task, the ids of its test rows whose expression is in another trained task's train split."""
    tasks = {name: get_task(name, recipe) for name in TASKS}
    train = {name: {r["expression"] for r in t.rows("train")} for name, t in tasks.items()}
    return {name: {r["id"] for r in t.rows("test") if any(r["expression"] in train[o] for o in TASKS if o != name)}
            for name, t in tasks.items()}


def gap(rows: dict, a: str, b: str, keep) -> list:
    strata = []
    for task in TASKS:
        a_ids, a_v = row_values(rows[a]["folder"], rows[a]["row"]["name"], task)
        b_ids, b_v = row_values(rows[b]["folder"], rows[b]["row"]["name"], task)
        x, y = stats.align(a_ids, a_v, b_ids, b_v, what=task)
        mask = [keep(task, i) for i in a_ids]
        strata.append(([v for v, m in zip(x, mask) if m], [v for v, m in zip(y, mask) if m]))
    return strata


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results" / "decide2")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    recipe = hx.recipe.load_run_recipe(args.results / f"seed{args.seeds[0]}" / "main")
    over = overlapping(recipe)
    sizes = {t: len(get_task(t, recipe).rows("test")) for t in TASKS}
    print("test rows whose expression is in the other task's train split: "
          + ", ".join(f"{t} {len(over[t])} of {sizes[t]}" for t in TASKS))
    per_seed = {s: resolve(PLAN, args.results / f"seed{s}") for s in args.seeds}
    print("\n| hyper-es minus | rows | " + " | ".join(f"seed {s}" for s in args.seeds) + " | pooled |")
    print("|---|---|" + "---|" * (len(args.seeds) + 1))
    for control in CONTROLS:
        for label, keep in (("overlapping", lambda t, i: i in over[t]), ("the rest", lambda t, i: i not in over[t])):
            cells, pooled = [], []
            for s in args.seeds:
                strata = gap(per_seed[s], "hyper-es", control, keep)
                cells.append(fmt_diff(stats.paired_bootstrap(strata).to_dict()))
                pooled += strata
            print(f"| {control} | {label} | " + " | ".join(cells) + f" | {fmt_diff(stats.paired_bootstrap(pooled).to_dict())} |")
    where = args.results.resolve()
    shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where.name
    print(f"\ncommand: python bench/overlap.py --results {shown} --seeds " + " ".join(map(str, args.seeds)))


if __name__ == "__main__":
    main()
