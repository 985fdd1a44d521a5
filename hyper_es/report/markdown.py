"""report.md: a run report's tables in Markdown, no wider than WIDTH columns, and its chosen prompts in full."""

from __future__ import annotations

import json


WIDTH = 120  # report.md tables and the console table fit in this many columns


def _fmt(v, digits=3) -> str:
    return "—" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def fmt_diff(d: dict | None) -> str:
    """A difference and its CI in points (×100, one decimal): "+1.0 [-2.0, 4.0]"."""
    if d is None:
        return "—"
    diff, low, high = (round(100 * d[k], 1) + 0.0 for k in ("diff", "low", "high"))  # + 0.0: no "-0.0"
    return f"{diff:+.1f} [{low:.1f}, {high:.1f}]"


def _md_tables(head: list[str], body: list[list[str]], width: int = WIDTH, left: int = 1) -> list[str]:
    """Padded markdown tables (the first `left` columns left-aligned, the others right-aligned), no wider than
    `width`: the columns after the first are split over as many tables as needed, each repeating the first."""
    w = [max(len(c) for c in col) for col in zip(head, *body)]
    groups, cur = [], []
    for j in range(1, len(head)):
        if cur and w[0] + 4 + sum(w[i] + 3 for i in cur) + w[j] + 3 > width:
            groups.append(cur)
            cur = []
        cur.append(j)
    groups.append(cur)
    def line(cells: list[str], cols: list[int]) -> str:
        return "| " + " | ".join(cells[i].ljust(w[i]) if i < left else cells[i].rjust(w[i]) for i in cols) + " |"

    lines = []
    for g in groups:
        cols = [0, *g]
        lines += [*([""] * bool(lines)), line(head, cols),
                  "|" + "|".join(":" + "-" * (w[i] + 1) if i < left else "-" * (w[i] + 1) + ":" for i in cols) + "|",
                  *(line(cells, cols) for cells in body)]
    return lines


def _greedy_columns(report: dict) -> tuple[list[str], list[list[str]]]:
    """Cost and greedy accuracy per task (and the mean over tasks) of every row."""
    mean = any("greedy" in r["mean"] for r in report["rows"]) and len(report["tasks"]) > 1
    head = ["model", "steps", "train tokens", "search tokens", "select tokens", "wall s", *report["tasks"],
            *(["mean"] * mean)]
    body = [[r["name"], _fmt(r["optimizer_steps"]), _fmt(r["train_tokens"]), _fmt(r["search_tokens"]),
             _fmt(r.get("select_tokens")), _fmt(r["wall_s"], 0),
             *[_fmt(r["results"].get(t, {}).get("greedy")) for t in report["tasks"]],
             *([_fmt(r["mean"].get("greedy"))] * mean)] for r in report["rows"]]
    return head, body


def _paired_columns(report: dict, ref: str) -> tuple[list[str], list[list[str]]]:
    paired = report.get("paired") or {}
    pooled = list(paired.get("pooled", {}))
    head = ["model", *report["tasks"], *[f"pooled: {p}" for p in pooled]]
    body = [[name, *[fmt_diff(d["tasks"].get(t)) for t in report["tasks"]],
             *[fmt_diff(d["pooled"].get(p)) for p in pooled]]
            for name, d in paired.get("vs", {}).get(ref, {}).items()]
    return head, body


def report_markdown(report: dict) -> str:
    e = report["eval"]
    limit = f" (first {e['limit']} problems each)" if e["limit"] else ""
    lines = [f"# {report['recipe']}: {report['model']}", "",
             f"Held-out test sets{limit}. greedy: one "
             f"completion at temperature 0; pass@k: unbiased estimate from n={e['n']} samples at temperature "
             f"{e['temperature']:g}.", "", "## Greedy accuracy", "", *_md_tables(*_greedy_columns(report))]
    ks = [f"pass@{k}" for k in e["k"]]
    sampled = [r for r in report["rows"] if any(k in res for res in r["results"].values() for k in ks)]
    if sampled:
        body = [[r["name"], t, *[_fmt(res.get(m)) for m in ("greedy", *ks)]]
                for r in sampled for t, res in [*((t, r["results"].get(t, {})) for t in report["tasks"]),
                                                 *([("mean", r["mean"])] * (len(report["tasks"]) > 1))]]
        subset = f"First {e['pass_k_limit']} problems of each test set. " if e.get("pass_k_limit") else ""
        lines += ["", "## Pass@k", "", *([subset, ""] if subset else []), *_md_tables(["model", "task", "greedy", *ks], body, left=2)]
    paired = report.get("paired")
    if paired:
        pooled = "; ".join(f"{p}: {', '.join(ts)}" for p, ts in paired["pooled"].items())
        best = (report.get("baseline_best") or {}).get("name")
        for ref, title in (("baseline", "the GRPO-LoRA baseline (final adapter)"),
                           ("baseline-best", f"the GRPO-LoRA baseline's best adapter by validation ({best})"),
                           ("base", "the base model")):
            if ref not in paired["vs"]:
                continue
            lines += ["", f"## Paired differences vs {ref}", "",
                      f"Greedy accuracy of each row minus {title}, in points (×100), on the same problems: "
                      f"Δ [95% CI], paired bootstrap percentile interval ({paired['B']:,} resamples of the "
                      f"problems, seed {paired['seed']}). Pooled: the mean over tasks, each weighing the same, "
                      f"problems resampled within each task ({pooled}).", "",
                      *_md_tables(*_paired_columns(report, ref))]
        if paired["without_records"]:
            lines += ["", f"No per-problem records (evaluated before they were kept), so no paired differences "
                          f"for: {', '.join(paired['without_records'])}. Delete their eval/<row>.json and re-run "
                          f"to evaluate them again."]
    if report.get("splits"):
        lines += ["", *splits_markdown(report["splits"])]
    for row, prompt in (report.get("prompts") or {}).items():
        lines += ["", *prompt_markdown(row, prompt["prompt"], scan=prompt.get("scan"))]
    s = report["search"]
    if s["generations"]:
        lines += ["", f"Search: {s['generations']} generations, {s['evals']} candidates, {_fmt(s['tokens'])} tokens, "
                  f"{_fmt(s['seconds'], 0)} s."]
    return "\n".join(lines) + "\n"


def prompt_markdown(row: str, prompt: dict, scan: dict | None = None) -> list[str]:
    """A co-evolved prompt, or a prompt control's choice (with its `scan`), in full, per task (PromptGenome.describe)."""
    lines = [f"## The co-evolved prompt ({row})", ""] if scan is None else [
        f"## The chosen prompt ({row})", "", "Per task, the best by validation of the task's own prompt and each "
        "prompt one gene away (scores in that order: " + "; ".join(
            f"{t}: {', '.join(f'{v:.3f}' for v in s)}" for t, s in scan.items()) + "):", ""]
    for task, p in prompt.items():
        shots = p["shots"]
        lines += [f"- **{task}** (genes {json.dumps(p['genes'])}):",
                  f"  - system: {json.dumps(p['system'])}", f"  - template: {json.dumps(p['template'])}",
                  f"  - format line: {json.dumps(p['format'])}",
                  "  - few-shot examples: " + ("drawn per row, as the task's prompt.few_shot" if shots is None else
                                               "; ".join(f"{s['id']}: {json.dumps(s['question'])}" for s in shots)
                                               or "none")]
    return lines


def splits_markdown(splits: dict) -> list[str]:
    body = [[name, st["partition"], *[f"{st['splits'][s]['distinct']:,} / {st['splits'][s]['rows']:,}"
                                      if s in st["splits"] else "–" for s in ("train", "val", "test")],
             ", ".join(f"{k} {v}" for k, v in st["overlap"].items()) or "–"] for name, st in splits.items()]
    return ["## Splits", "", "Distinct questions / rows per split, and the questions two splits share (partition "
            "`question`: each distinct question is in one split, by a hash of its text).", "",
            *_md_tables(["task", "partition", "train", "val", "test", "shared questions"], body)]
