"""Paired bootstrap (hand-checkable cases), per-problem records in eval rows, and the report's paired tables."""

import json
import time

import numpy as np
import pytest

from hyper_es.errors import DataError, HyperESError
from hyper_es.evaluate.final import read_row, greedy_records, sampled_records, write_row
from hyper_es.evaluate.stats import align, paired_bootstrap
from hyper_es.report import WIDTH, paired_differences, report_markdown


def discordant(n: int, b: int, c: int, both: int) -> tuple[np.ndarray, np.ndarray]:
    """n problems: b only A solves, c only B solves, `both` both solve, the rest neither."""
    a = np.r_[np.ones(b), np.zeros(c), np.ones(both), np.zeros(n - b - c - both)]
    bb = np.r_[np.zeros(b), np.ones(c), np.ones(both), np.zeros(n - b - c - both)]
    return a, bb


def test_difference_is_exact_and_ci_matches_the_discordant_pairs():
    a, b = discordant(200, 14, 4, 30)
    r = paired_bootstrap([(a, b)])
    assert r.diff == (14 - 4) / 200 and r.n == 200 and r.a == 44 / 200 and r.b == 34 / 200
    assert r.low < r.diff < r.high
    # the paired SE: sqrt(discordant share − diff²) / sqrt(n); the percentile CI is about ±1.96 SE
    se = np.sqrt((14 + 4) / 200 - r.diff ** 2) / np.sqrt(200)
    assert (r.high - r.low) / 2 == pytest.approx(1.96 * se, rel=0.15)


def test_the_interval_is_95_percent():
    """On 4,000 problems the percentile interval is the normal one, ±1.96 paired SE, to a few percent: a 90%
    interval (±1.645 SE) is 16% narrower and fails, so does a 99% one (±2.58 SE)."""
    a, b = discordant(4000, 600, 400, 1000)
    r = paired_bootstrap([(a, b)], B=20_000)
    se = np.sqrt((600 + 400) / 4000 - r.diff ** 2) / np.sqrt(4000)
    assert (r.high - r.low) / 2 == pytest.approx(1.96 * se, rel=0.04)
    assert (r.low + r.high) / 2 == pytest.approx(r.diff, abs=0.1 * se)


def test_ci_shrinks_with_n_and_all_equal_is_zero():
    small = paired_bootstrap([discordant(100, 7, 2, 10)])
    large = paired_bootstrap([discordant(1000, 70, 20, 100)])
    assert small.diff == large.diff == 0.05
    assert large.high - large.low < 0.5 * (small.high - small.low)
    same = np.r_[np.ones(30), np.zeros(70)]
    r = paired_bootstrap([(same, same.copy())])
    assert (r.diff, r.low, r.high) == (0.0, 0.0, 0.0)


def test_seeded_reproducible_and_same_as_resampling_indices():
    a, b = discordant(300, 25, 10, 40)
    assert paired_bootstrap([(a, b)], seed=3) == paired_bootstrap([(a, b)], seed=3)
    assert paired_bootstrap([(a, b)], B=50, seed=3) != paired_bootstrap([(a, b)], B=50, seed=4)  # (B = 10,000:
    # the 2.5% and 97.5% points of a lattice of step 1/300 often coincide across seeds)
    # The multinomial draw over distinct differences is the index bootstrap, in distribution.
    rng = np.random.default_rng(0)
    d = a - b
    naive = d[rng.integers(0, d.size, size=(20_000, d.size))].mean(1)
    r = paired_bootstrap([(a, b)], B=20_000)
    assert [r.low, r.high] == pytest.approx(np.percentile(naive, [2.5, 97.5]), abs=0.006)


def test_pooled_is_stratified_with_equal_task_weights():
    t1, t2 = discordant(100, 10, 0, 0), discordant(400, 0, 0, 0)  # +10 points on one task, 0 on the other
    r = paired_bootstrap([t1, t2])
    assert r.diff == pytest.approx(0.05) and r.n == 500  # mean over tasks, not 10 / 500 over problems
    assert r.low == pytest.approx(paired_bootstrap([t1]).low / 2)  # task 2 adds no variance


def test_fast_at_full_scale():
    rng = np.random.default_rng(1)
    a, b = (rng.random(3000) < 0.3).astype(float), (rng.random(3000) < 0.3).astype(float)
    t0 = time.process_time()  # this process's CPU time: what a loaded machine does not stretch
    paired_bootstrap([(a, b)], B=10_000)
    assert time.process_time() - t0 < 1.0
    f = rng.random(3000)  # many distinct values: still bounded and quick
    t0 = time.process_time()
    paired_bootstrap([(f, rng.random(3000))], B=10_000)
    assert time.process_time() - t0 < 5.0


def test_align_matches_ids_and_refuses_other_problems():
    a, b = align(["p1", "p2", "p3"], [1, 0, 1], ["p3", "p1", "p2"], [0, 1, 1])
    assert a.tolist() == [1, 0, 1] and b.tolist() == [1, 1, 0]
    with pytest.raises(HyperESError, match="different problems .*only in A"):
        align(["p1", "p2"], [1, 0], ["p1", "p4"], [1, 1], what="hyper-es vs baseline, chain_sum")
    with pytest.raises(HyperESError, match="repeated problem ids"):
        align(["p1", "p1"], [1, 0], ["p1", "p2"], [1, 1])


# --- per-problem records in eval/<row>.json -------------------------------------------------------------------------
def _records(ids, scores_per_problem):
    return [{"id": i, "reference": "0", "completions": ["x"] * len(s), "scores": s}
            for i, s in zip(ids, scores_per_problem)]


def test_records_round_trip_compactly(tmp_path):
    ids = [f"t-{i:04d}" for i in range(50)]
    greedy = greedy_records(_records(ids, [[1.0 if i % 3 == 0 else 0.5] for i in range(50)]))
    assert greedy["greedy"][:4] == [1, 0, 0, 1]  # a partial reward (0.5) is not correct
    sampled = sampled_records(_records(ids, [[1.0] * (i % 5) + [0.0] * (4 - i % 5) for i in range(50)]), ids)
    assert sampled["n"] == 4 and sampled["correct"][:6] == [0, 1, 2, 3, 4, 0]
    row = {"name": "baseline", "kind": "baseline", "steps": 10, "results": {
        "a": {"greedy": 0.34, "problems": 50, "tokens": 9, "pass@1": 0.5, "n": 4, "records": {**greedy, **sampled}},
        "ab": {"greedy": 0.34, "problems": 50, "tokens": 9, "records": greedy}}}
    write_row(tmp_path / "baseline.json", row)
    text = (tmp_path / "baseline.json").read_text()
    assert read_row(tmp_path / "baseline.json") == row == json.loads(text)
    assert len(text.splitlines()) < 40 and "completions" not in text  # one line per list, no completion text


def test_old_rows_load_and_damaged_records_are_refused(tmp_path):
    old = {"name": "base", "kind": "base", "steps": 0, "results": {"a": {"greedy": 0.1, "problems": 3, "tokens": 1}}}
    (tmp_path / "base.json").write_text(json.dumps(old))
    assert read_row(tmp_path / "base.json") == old
    old["results"]["a"]["records"] = {"ids": ["1", "2", "3"], "greedy": [1, 0]}
    (tmp_path / "base.json").write_text(json.dumps(old))
    with pytest.raises(DataError, match="a: damaged per-problem records"):
        read_row(tmp_path / "base.json")


# --- the report's paired tables -----------------------------------------------------------------------------------
def _row(name, kind, per_task, records=True):
    res = {}
    for t, g in per_task.items():
        res[t] = {"greedy": sum(g) / len(g), "problems": len(g), "tokens": 1}
        if records:
            res[t]["records"] = {"ids": [f"{t}-{i}" for i in range(len(g))][::-1], "greedy": g[::-1]}
    return {"name": name, "kind": kind, "steps": 0, "results": res}


def _report(rows, paired):
    tasks = sorted(rows[0]["results"])
    out = [{"name": r["name"], "kind": r["kind"], "optimizer_steps": 1, "train_tokens": 1_234, "search_tokens": 0,
            "wall_s": 1.0, "results": {t: {k: v for k, v in res.items() if k != "records"}
                                       for t, res in r["results"].items()},
            "mean": {"greedy": sum(res["greedy"] for res in r["results"].values()) / len(tasks)}} for r in rows]
    return {"recipe": "r", "model": "m", "tasks": tasks, "rows": out, "paired": paired,
            "eval": {"k": [1], "n": 1, "temperature": 1.0, "limit": None},
            "search": {"generations": 1, "evals": 4, "tokens": 10, "seconds": 1.0}}


def test_paired_differences_in_the_report():
    base = _row("base", "base", {"basic_arithmetic_long_name": [0] * 20, "gsm8k": [0] * 10, "chain_sum": [0] * 10})
    baseline = _row("baseline", "baseline", {"basic_arithmetic_long_name": [1] * 5 + [0] * 15, "gsm8k": [0] * 10,
                                             "chain_sum": [1] * 2 + [0] * 8})
    hyper = _row("hyper-es", "hyper-es", {"basic_arithmetic_long_name": [1] * 8 + [0] * 12, "gsm8k": [1] + [0] * 9,
                                          "chain_sum": [1] * 2 + [0] * 8})
    old = _row("dir-0", "direction", {"basic_arithmetic_long_name": [0] * 20, "gsm8k": [0] * 10,
                                      "chain_sum": [0] * 10}, records=False)
    rows = [base, old, baseline, hyper]
    tasks = sorted(base["results"])
    paired = paired_differences(rows, tasks, ["basic_arithmetic_long_name", "chain_sum"], B=2000, seed=0)
    assert paired["without_records"] == ["dir-0"] and set(paired["vs"]) == {"baseline", "base"}
    h = paired["vs"]["baseline"]["hyper-es"]
    assert h["tasks"]["basic_arithmetic_long_name"]["diff"] == 3 / 20 and h["tasks"]["chain_sum"]["diff"] == 0
    assert h["pooled"]["trained"]["diff"] == pytest.approx(3 / 40)
    assert h["pooled"]["all"]["diff"] == pytest.approx((3 / 20 + 1 / 10) / 3)
    assert set(paired["vs"]["base"]) == {"baseline", "hyper-es"}
    md = report_markdown(_report(rows, paired))
    assert "## Paired differences vs baseline" in md and "## Paired differences vs base\n" in md
    assert "| hyper-es |" in md and "+15.0 [" in md and "no paired differences for: dir-0" in md.replace("\n", " ")
    table_lines = [line for line in md.splitlines() if line.startswith("|")]
    assert max(map(len, table_lines)) <= WIDTH
    # ids are matched, not positions: a row scored on other problems is refused
    hyper["results"]["gsm8k"]["records"]["ids"][0] = "other"
    with pytest.raises(HyperESError, match="hyper-es vs base.*gsm8k.*different problems"):
        paired_differences(rows, tasks, [], B=100, seed=0)


def test_baseline_best_by_validation_ties_go_to_fewer_steps():
    from hyper_es.report import baseline_best

    def row(name, kind, steps, val=None):
        return {"name": name, "kind": kind, "steps": steps, "results": {},
                **({"val": {"mean": val, "rows": 200, "tasks": {}}} if val is not None else {})}

    rows = [row("base", "base", 0), row("baseline@6", "baseline-snapshot", 6, 0.40),
            row("baseline@12", "baseline-snapshot", 12, 0.45), row("baseline@18", "baseline-snapshot", 18, 0.45),
            row("baseline", "baseline", 27, 0.43), row("hyper-es", "hyper-es", 24, 0.9)]
    best = baseline_best(rows)
    assert best["name"] == "baseline@12" and best["val"] == 0.45 and best["steps"] == 12
    assert set(best["candidates"]) == {"baseline@6", "baseline@12", "baseline@18", "baseline"}
    assert baseline_best([row("base", "base", 0), row("baseline", "baseline", 27)]) is None
    # trained on top of a given adapter: its step 0 is that adapter (kept on a tie), and the base is no candidate
    on = [row("base", "base", 0, 0.5), row("add", "direction", 0, 0.45), row("other", "direction", 0, 0.6),
          row("baseline@6", "baseline-snapshot", 6, 0.45), row("baseline", "baseline", 27, 0.40)]
    best = baseline_best(on, start="add")
    assert best["name"] == "add" and set(best["candidates"]) == {"add", "baseline@6", "baseline"}


def test_the_console_summary_is_one_row_per_model_within_100_columns():
    """`hyper-es run` prints one table: one line per model, no wrapped cell, at most 100 columns wide."""
    from rich.console import Console

    from hyper_es.report import CONSOLE_WIDTH, report_table

    rows = [_row(n, k, {"basic_arithmetic_long_name": [1] * 12 + [0] * 8, "chain_sum": [0] * 10, "gsm8k": [1] * 10})
            for n, k in (("base", "base"), ("baseline@24", "baseline-snapshot"), ("baseline", "baseline"),
                         ("baseline+es+grpo", "es-grpo"), ("hyper-es", "hyper-es"))]
    rows[-1]["results"]["chain_sum"]["records"]["greedy"] = [1] * 10
    tasks = sorted(rows[0]["results"])
    paired = paired_differences(rows, tasks, ["basic_arithmetic_long_name", "chain_sum"], B=500, seed=0)
    report = _report(rows, paired)
    for r in report["rows"]:
        r.update(optimizer_steps=1234, train_tokens=1_234_567, search_tokens=12_345_678, select_tokens=1_000,
                 tokens=13_581_245, wall_s=12345.0)
    console = Console(width=CONSOLE_WIDTH, record=True)
    report_table(report, console)
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= CONSOLE_WIDTH
    body = [ln for ln in lines if ln.startswith("│")]
    assert len(body) == len(rows)  # one line per model (the header has heavy borders)
    assert any("hyper-es" in ln and "[" in ln and "13,581,245" in ln for ln in body)  # every token of the row
