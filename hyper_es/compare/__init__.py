"""A comparison across seeds: its plan (ROOT/compare.json), the summary from the per-seed run folders, its
Markdown and figure. `hyper-es report ROOT` renders it again from disk."""

from __future__ import annotations

from pathlib import Path

from hyper_es.compare.plan import PLAN, ComparePlan, Goal, read_plan, write_plan
from hyper_es.rundir import REPORT_FILE, SUMMARY_FILE, SUMMARY_MD

__all__ = ["PLAN", "ComparePlan", "Goal", "read_plan", "render", "write_plan"]


def render(root: Path, seeds: list[int] | None = None, *, figure: bool = True) -> tuple[dict, str]:
    """ROOT/summary.json, summary.md and accuracy_cost.png from ROOT/compare.json and the run folders under
    ROOT/seed<N>/; returns the summary and its Markdown."""
    from hyper_es.compare import markdown as md
    from hyper_es.compare.figure import figure as draw
    from hyper_es.compare.summary import partial, seed_dirs, summarize
    from hyper_es.io import read_json, write_json_atomic

    root = Path(root)
    plan = read_plan(root)
    summary = summarize(plan, root, seeds)
    summary["partial"] = partial(plan, root, seeds)
    if figure:
        draw(plan, summary, root)
    reports = (f for d in seed_dirs(root, seeds).values() for arm in dict.fromkeys(a for a, _ in plan.rows.values())
               if (f := d / arm / REPORT_FILE).is_file())
    evals = (read_json(f, "re-run that arm").get("eval") for f in reports)  # read until one has its settings
    sampling = next((e for e in evals if e), None)  # the arms' sampling settings, for the Pass@k heading
    write_json_atomic(root / SUMMARY_FILE, summary)
    text = md.markdown(plan, summary, root, sampling, len(seed_dirs(root, seeds)))
    (root / SUMMARY_MD).write_text(text)
    return summary, text
