"""`hyper-es run` end to end on the tiny model (HF backend): report rows, costs, raw rows exact, resume, --quick."""

import json
import math
import os
import re
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
import torch

import hyper_es as hx
from hyper_es.evaluate.final import eval_set, plan_rows, row_vector
from hyper_es.merging import MergePlan, MergeSettings, genome_for
from hyper_es.pipeline import quick, run
from recipes import tiny_recipe

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipeline")
    recipe = tiny_recipe(folder, {
        "gradient": {"steps": 3, "baseline_snapshot_every": 2, "learning_rate": 0.01},  # baseline: ceil(9 / 0.9) = 10
        "tasks.0.reward": "dense_reward:digit_fraction",  # a random model scores 0 on `numeric`: a dense one
        "merge": {"density": 0.6, "lam": 0.8, "layer_group_size": 2, "per_direction_density": True},
        "eval": {"k": [1, 2], "n": 2, "pass_k_limit": 10},
        "search.scale_scan": [0.5, 1.0, 2.0]})  # also the `scaled` control's scales
    report = run(recipe, folder / "run", backend="hf")
    return recipe, folder / "run", report


def test_report_rows_costs_and_files(tiny_run):
    recipe, run_dir, report = tiny_run
    names = [r["name"] for r in report["rows"]]
    assert names == ["base", "dir-0", "dir-1", "dir-2", "uniform", "baseline@2", "baseline@4", "baseline@6",
                     "baseline@8", "baseline", "hyper-es", "search-start", "scaled"]
    assert hx.DirectionSet.from_run(run_dir).zero_directions() == []  # the search merged directions that move
    rows = {r["name"]: r for r in report["rows"]}
    assert rows["hyper-es"]["optimizer_steps"] == 9 and rows["baseline"]["optimizer_steps"] == 10
    assert rows["baseline"]["optimizer_steps"] / rows["hyper-es"]["optimizer_steps"] >= 1.1
    assert rows["hyper-es"]["search_tokens"] == report["search"]["tokens"] > 0
    log = [json.loads(x) for x in (run_dir / "search" / "generations.jsonl").read_text().splitlines()]
    scan = json.loads((run_dir / "search" / "result.json").read_text()).get("scale_scan") or {}
    assert report["search"]["tokens"] == sum(r["tokens"] for r in log) + scan.get("tokens", 0)  # fitness tokens
    cost = json.loads((run_dir / "search" / "result.json").read_text())["cost"]
    val_tokens = cost["total"]["select_tokens"]
    assert cost["total"]["search_tokens"] == report["search"]["tokens"]  # the stage's record is what the row is charged
    assert rows["hyper-es"]["select_tokens"] == val_tokens > 0  # the search's validation scorings
    assert rows["hyper-es"]["tokens"] == rows["hyper-es"]["train_tokens"] + report["search"]["tokens"] + val_tokens
    start = rows["search-start"]  # the search's start alone: the directions and the scale scan, no validation
    assert (start["train_tokens"], start["search_tokens"], start["select_tokens"]) == (
        rows["uniform"]["train_tokens"], scan["tokens"], 0) and scan["tokens"] > 0
    cands = [r["val"]["tokens"] for r in report["rows"] if r["kind"] in ("base", "baseline", "baseline-snapshot")]
    assert rows["baseline@4"]["select_tokens"] == sum(cands) and rows["baseline"]["select_tokens"] == 0
    assert report["baseline_best"]["select_tokens"] == sum(cands)  # whichever candidate it is
    assert rows["hyper-es"]["wall_s"] > rows["uniform"]["wall_s"] > 0
    assert 0 < rows["baseline@2"]["train_tokens"] < rows["baseline@8"]["train_tokens"] < rows["baseline"]["train_tokens"]
    for name in ("base", "baseline", "hyper-es"):  # the compared rows carry Pass@k and the full curve
        res = rows[name]["results"]["chain_sum"]
        assert {"greedy", "pass@1", "pass@2"} <= set(res) and len(res["pass_curve"]) == 2
        assert all(0 <= v <= 1 for v in res["pass_curve"])
    assert "pass@2" not in rows["dir-0"]["results"]["chain_sum"]
    assert json.loads((run_dir / "report.json").read_text()) == report
    md = (run_dir / "report.md").read_text()
    assert re.search(r"^\| hyper-es +\| +9 \|", md, re.M) and re.search(r"^\| hyper-es +\| chain_sum +\|", md, re.M)
    assert "## Paired differences vs baseline" in md and "## Paired differences vs base\n" in md
    assert max(len(line) for line in md.splitlines() if line.startswith("|")) <= 120


def test_per_problem_records_and_paired_differences(tiny_run):
    """Every eval row keeps per-problem greedy correctness (and sample counts for Pass@k rows); the report pairs
    every row with the baseline and the base on the same problems."""
    recipe, run_dir, report = tiny_run
    rows = {r["name"]: r for r in report["rows"]}
    for name in rows:
        res = json.loads((run_dir / "eval" / f"{name}.json").read_text())["results"]["chain_sum"]
        rec = res["records"]
        assert len(rec["ids"]) == len(rec["greedy"]) == res["problems"] == 16
        assert sum(rec["greedy"]) / 16 == res["greedy"]
        assert ("correct" in rec) == (name in ("base", "baseline", "hyper-es"))
        if "correct" in rec:  # Pass@k sampled on the first pass_k_limit problems only
            assert rec["n"] == 2 and len(rec["correct"]) == 10 and all(0 <= c <= 2 for c in rec["correct"])
            assert res["pass_k_problems"] == 10 and res["pass@2"] == sum(c > 0 for c in rec["correct"]) / 10
        assert "records" not in rows[name]["results"]["chain_sum"]  # report.json stays small
    paired = report["paired"]
    assert paired["without_records"] == [] and paired["pooled"] == {"trained": ["chain_sum"]}
    assert set(paired["vs"]["baseline"]) == set(rows) - {"baseline"}
    h = paired["vs"]["baseline"]["hyper-es"]
    want = rows["hyper-es"]["results"]["chain_sum"]["greedy"] - rows["baseline"]["results"]["chain_sum"]["greedy"]
    assert h["tasks"]["chain_sum"]["diff"] == pytest.approx(want) == h["pooled"]["trained"]["diff"]
    assert h["tasks"]["chain_sum"]["low"] <= h["tasks"]["chain_sum"]["diff"] <= h["tasks"]["chain_sum"]["high"]
    assert (run_dir / "geometry.json").is_file() and (run_dir / "search" / "best.json").is_file()


def test_the_scaled_row_is_base_plus_the_scanned_scale_times_the_baseline_update(tiny_run):
    """`scaled`: the scale of the baseline's update chosen on validation (ties: nearest 1), its ΔW exactly s·ΔW, the
    engine's weights base + s·ΔW, and its cost the baseline's job plus the scan's validation tokens."""
    from hyper_es.engine import inplace_engine
    from hyper_es.evaluate.final import eval_set, plan_rows, row_vector
    from hyper_es.merging import genome_for, recipe_genome
    from hyper_es.rows import row_update

    recipe, run_dir, report = tiny_run
    chosen = json.loads((run_dir / "eval/val/scaled.json").read_text())
    scan = {float(k): v for k, v in chosen["scan"].items()}
    assert set(scan) == {0.5, 1.0, 2.0}
    top = max(scan.values())
    assert chosen["scale"] == min((s for s, v in scan.items() if v == top), key=lambda s: abs(s - 1.0))
    assert chosen["tokens"] == sum(json.loads((run_dir / f"eval/val/scaled@{s:g}.json").read_text())["tokens"]
                                   for s in scan) > 0
    baseline, scaled = row_update(run_dir, "baseline", recipe), row_update(run_dir, "scaled", recipe)
    assert all(torch.equal(scaled[t], chosen["scale"] * baseline[t]) for t in baseline)
    assert sum(float(d.abs().sum()) for d in baseline.values()) > 0  # a real update, so the checks are not 0 == s·0
    rows = {r["name"]: r for r in report["rows"]}
    assert rows["scaled"]["optimizer_steps"] == rows["baseline"]["optimizer_steps"]
    assert rows["scaled"]["train_tokens"] == rows["baseline"]["train_tokens"]
    assert rows["scaled"]["select_tokens"] == chosen["tokens"]
    assert rows["scaled"]["tokens"] == rows["baseline"]["train_tokens"] + chosen["tokens"]
    ds, names, snaps = eval_set(run_dir)
    layout, settings = recipe_genome(recipe, ds)
    genome = genome_for(ds, layer_group_size=layout.layer_group_size, module_groups=layout.module_groups,
                        per_direction_density=True)
    row = next(r for r in plan_rows(run_dir, names, snaps) if r.name == "baseline")
    row.weights = {"baseline": chosen["scale"]}
    engine, _ = inplace_engine(recipe, "hf", ds, genome, settings, run_dir / "eval" / "engine-check", seed=0)
    try:
        base = {t: w.cpu().clone() for t, w in engine.weights().items()}  # a GPU engine's are on cuda
        engine.set_genome(row_vector(row, genome, names, recipe.merge.density, recipe.merge.lam))
        params = dict(engine.model.named_parameters()) if hasattr(engine, "model") else engine.params
        for t, d in baseline.items():
            assert torch.allclose(params[t].float().cpu(), base[t] + chosen["scale"] * d, atol=1e-6), t
    finally:
        engine.close()
    # `hyper-es export RUN --row scaled` serves those weights: base + s·ΔW
    from transformers import AutoModelForCausalLM
    from typer.testing import CliRunner

    from hyper_es.cli import app

    out = run_dir.parent / "scaled-hf"
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "hf", "--out", str(out), "--row", "scaled"])
    assert res.exit_code == 0, res.output
    got = AutoModelForCausalLM.from_pretrained(out).state_dict()
    for t, d in baseline.items():
        torch.testing.assert_close(got[t], base[t] + chosen["scale"] * d, rtol=0, atol=1e-6)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "mergekit", "--out", str(out.with_suffix(".yaml")),
                                   "--row", "scaled"])
    assert res.exit_code == 2 and "a row exports as hf or peft" in res.output
    # `hyper-es analyze scale-fit`: the scaled row is exactly s × the baseline, in every block of layers
    res = CliRunner().invoke(app, ["analyze", "scale-fit", str(run_dir), "--out", str(run_dir.parent / "fit"),
                                   "--rows", "scaled,hyper-es"])
    assert res.exit_code == 0, res.output
    fitted = json.loads((run_dir.parent / "fit/scale_fit.json").read_text())
    assert fitted["reference"] == "baseline" and fitted["block_size"] == recipe.merge.layer_group_size
    for f in [fitted["rows"]["scaled"], *fitted["rows"]["scaled"]["blocks"].values()]:
        assert f["scale"] == pytest.approx(chosen["scale"]) and f["unexplained"] == pytest.approx(0, abs=1e-9)
    assert 0 <= fitted["rows"]["hyper-es"]["unexplained"] <= 1


def test_baseline_best_snapshot_is_chosen_on_validation(tiny_run):
    """The base (step 0), the baseline and each snapshot carry a greedy validation score (the search's val rows,
    with its tokens); the report names the best (ties: fewer steps, so the base on a tie) and pairs every row with
    it too."""
    recipe, run_dir, report = tiny_run
    rows = {r["name"]: r for r in report["rows"]}
    scored = {n: r["val"]["mean"] for n, r in rows.items() if "val" in r and n != "scaled"}
    assert set(scored) == {"base", "baseline@2", "baseline@4", "baseline@6", "baseline@8", "baseline"}
    assert all(rows[n]["val"]["tokens"] > 0 and rows[n]["val"]["seconds"] > 0 for n in scored)
    assert all(rows[n]["val"]["rows"] == recipe.fitness.val_size for n in scored)
    best = report["baseline_best"]
    top = max(scored.values())
    assert best["val"] == top and best["name"] == min((n for n in scored if scored[n] == top),
                                                      key=lambda n: rows[n]["optimizer_steps"])
    assert best["candidates"] == scored and report["paired"]["references"]["baseline-best"] == best["name"]
    assert set(report["paired"]["vs"]["baseline-best"]) == set(rows) - {best["name"]}
    assert "## Paired differences vs baseline-best" in (run_dir / "report.md").read_text()
    # validation only (to choose a learning rate before the rest): the same scores, read back from eval/val/
    from hyper_es.evaluate.final import evaluate_run

    vals = evaluate_run(recipe, run_dir, backend="hf", test=False)
    assert {r["name"]: r["val"]["mean"] for r in vals} == scored
    # eval.snapshots: best: only the best snapshot (and the final baseline) on test
    data = recipe.model_dump(mode="json")
    data["eval"]["snapshots"] = "best"
    best_only = hx.recipe.recipe_from_dict(data, recipe._path)
    other = next(n for n in scored if n not in (best["name"], "baseline"))
    (run_dir / "eval" / f"{other}.json").unlink()  # not scored on test yet: stays unscored (rows scored stay)
    names = [r["name"] for r in evaluate_run(best_only, run_dir, backend="hf")]
    assert other not in names and best["name"] in names and "baseline" in names
    assert not (run_dir / "eval" / f"{other}.json").exists()


def test_raw_rows_are_base_plus_delta_exactly(tiny_run):
    """A direction alone and the baseline are merged as trained (density 1, coefficient 1/λ), even though the
    recipe's merge uses DARE at 0.6 and λ = 0.8."""
    recipe, run_dir, _ = tiny_run
    ds, search_names, snaps = eval_set(run_dir)
    assert search_names == hx.DirectionSet.from_run(run_dir).names
    genome = genome_for(ds, layer_group_size=2, per_direction_density=True)
    plan = MergePlan(ds, genome, MergeSettings.from_config(recipe.merge))
    rows = {r.name: r for r in plan_rows(run_dir, search_names, snaps)}
    for name in ("dir-1", "baseline", "baseline@4"):
        x = row_vector(rows[name], genome, search_names, 0.6, 0.8)
        k = ds.names.index(name)
        for t, delta in plan.deltas(x):
            torch.testing.assert_close(delta, ds.delta(k, t), rtol=0, atol=1e-6)


def test_hyper_es_row_is_a_fresh_merge_of_best_json(tiny_run):
    """With per_direction_density the searched densities are part of the genome: the final evaluation merges
    exactly what best.json holds, and its greedy score equals a fresh export of best.json scored from scratch."""
    from hyper_es import models
    from hyper_es.engine.hf import HFGenerator
    from hyper_es.evaluate import evaluate_task
    from hyper_es.export import export_hf
    from hyper_es.tasks import Task

    recipe, run_dir, report = tiny_run
    best, x = hx.Genome.from_json(run_dir / "search" / "best.json")
    assert best.per_direction_density and x.size == len(best.keys) + 3
    search_ds = hx.DirectionSet.from_run(run_dir)
    settings = MergeSettings.from_config(recipe.merge)
    want = dict(MergePlan(search_ds, best, settings).deltas(x))
    ds, _, snaps = eval_set(run_dir)
    genome = genome_for(ds, layer_group_size=2, per_direction_density=True)
    row = {r.name: r for r in plan_rows(run_dir, search_ds.names, snaps)}["hyper-es"]
    for t, delta in MergePlan(ds, genome, settings).deltas(row_vector(row, genome, search_ds.names, 0.6, 0.8)):
        torch.testing.assert_close(delta, want[t], rtol=0, atol=1e-6)
    folder = export_hf(search_ds, best, x, settings, run_dir.parent / "best-export")
    model, tok = models.load(str(folder))
    task = Task(recipe.task("chain_sum"), recipe.base_dir)
    fresh = evaluate_task(HFGenerator(model, tok), tok, task, limit=recipe.eval.limit)
    got = {r["name"]: r for r in report["rows"]}["hyper-es"]["results"]["chain_sum"]["greedy"]
    assert fresh.pass_at[1] == got


def test_rerun_resumes_without_recomputing(tiny_run, caplog, monkeypatch):
    recipe, run_dir, report = tiny_run
    run(recipe, run_dir, backend="hf")  # rows another test deleted are scored again first
    stamps = {p: p.stat().st_mtime_ns for p in [*run_dir.glob("eval/*.json"), run_dir / "search/result.json"]}

    def no_load(*a, **kw):
        raise AssertionError("a finished evaluation must not load the adapters (or replay ES)")

    monkeypatch.setattr(hx.DirectionSet, "from_adapters", no_load)
    with caplog.at_level("INFO"):
        again = run(recipe, run_dir, backend="hf")
    assert again == report
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert any("search already finished" in r.message for r in caplog.records)


def test_quick_scales_the_recipe_down():
    recipe = hx.load_recipe(ROOT / "recipes/smollm2-135m.yaml")
    q = quick(recipe)
    assert q.gradient.directions == 2 and q.gradient.steps == 1 and q.gradient.baseline_snapshot_every == 4
    assert q.gradient.batch_size == 8 == 2 * q.gradient.num_generations and q.threads == max(1, os.cpu_count() or 1)
    assert q.search.popsize == 4 and q.search.max_generations == 2 and q.eval.limit == 10 and q.eval.k == [1, 4]
    assert q.fitness.minibatch == 8 and q.search.scale_scan is None and q.eval.pass_k_limit == 5
    assert q.eval.snapshots == "best"  # every snapshot scored on validation, the best one tested
    assert [t.name for t in q.tasks] == ["chain_sum", "add_sub"]  # the transfer set (GSM8K) waits for a full run
    assert [t.max_tokens for t in q.tasks] == [48, 48]  # the gradient stage's completion length
    assert q.name == "smollm2-135m-quick" and q.base_dir == recipe.base_dir
    from hyper_es.directions.jobs import plan_baseline, plan_directions

    total = sum(j.steps for j in plan_directions(q))
    assert plan_baseline(q).steps == math.ceil(total / 0.9) and plan_baseline(q).steps / total >= 1.1


@pytest.mark.parametrize("name", ["compare_grpo_lora", "custom_directions", "compose_adapters"])
def test_notebook_executes_on_the_tiny_run(tiny_run, name, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    _, run_dir, _ = tiny_run
    monkeypatch.setenv("HYPER_ES_RUNS", str(run_dir))
    monkeypatch.setenv("HYPER_ES_ADAPTERS", str(run_dir / "directions"))
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [(o.ename, o.evalue) for o in outputs if o.output_type == "error"]
    if name == "compare_grpo_lora":  # five figures: steps, Pass@k, search, coefficients, geometry
        assert sum("image/png" in o.get("data", {}) for o in outputs) >= 5
    if name == "compose_adapters":  # the rows, then the two coefficient maps in one figure
        text = "".join(o.get("text", "") for o in outputs)
        assert all(row in text for row in ("merge-ties", "hyper-es", "grad-fit", "dir-0"))
        assert sum("image/png" in o.get("data", {}) for o in outputs) == 1


def test_analyze_coverage_on_the_run(tiny_run, tmp_path):
    """`hyper-es analyze coverage`: Pass@k curves from the records agree with the evaluation's own Pass@k, and a
    problem counts as solved by one row only when no other row solves it in any sample."""
    from typer.testing import CliRunner

    from hyper_es.cli import app

    recipe, run_dir, report = tiny_run
    res = CliRunner().invoke(app, ["analyze", "coverage", str(run_dir), "--out", str(tmp_path / "cov")])
    assert res.exit_code == 0, res.output
    cov = json.loads((tmp_path / "cov" / "coverage.json").read_text())
    task = cov["tasks"]["chain_sum"]
    assert set(task["rows"]) == {"base", "baseline", "hyper-es"} and task["n"] == 2 and task["problems"] == 10
    rows = {r["name"]: r for r in report["rows"]}
    from hyper_es.evaluate.final import row_values

    for name, r in task["rows"].items():
        assert r["pass_curve"] == pytest.approx(rows[name]["results"]["chain_sum"]["pass_curve"])
        assert sum(r["solve_rate_hist"]) == 10
        res = rows[name]["results"]["chain_sum"]
        for metric in ("greedy", "pass@1", "pass@2"):  # per-problem values average to the reported score
            ids, values = row_values(run_dir, name, "chain_sum", metric)
            n = res["problems"] if metric == "greedy" else 10  # Pass@k on a prefix (eval.pass_k_limit)
            assert len(ids) == len(values) == n and np.mean(values) == pytest.approx(res[metric])
    recs = {n: json.loads((run_dir / "eval" / f"{n}.json").read_text())["results"]["chain_sum"]["records"]
            for n in task["rows"]}
    solved = {n: {i for i, c in zip(r["ids"], r["correct"]) if c} for n, r in recs.items()}
    assert task["rows"]["hyper-es"]["only_this_row"] == sorted(solved["hyper-es"] - solved["base"] - solved["baseline"])
    assert all((tmp_path / "cov" / f).stat().st_size > 0 for f in ("pass_at_k.png", "solve_rates.png", "unique_solves.png"))


def test_analyze_sparsity_on_the_run(tiny_run, tmp_path):
    """`hyper-es analyze sparsity`: at p = 1 a row's update scores what the final evaluation measured on the same
    problems, p = 0 is the base, and a cut keeps the top entries by magnitude."""
    from typer.testing import CliRunner

    from hyper_es.analyze.sparsity import top_fraction
    from hyper_es.cli import app

    d = {"a": torch.tensor([[0.1, -5.0], [0.2, 3.0]]), "b": torch.tensor([-0.4, 0.05, 2.0])}
    cut = top_fraction(d, 3 / 7)
    assert cut["a"].tolist() == [[0.0, -5.0], [0.0, 3.0]] and cut["b"].tolist() == [0.0, 0.0, 2.0]
    recipe, run_dir, _ = tiny_run
    res = CliRunner().invoke(app, ["analyze", "sparsity", str(run_dir), "--out", str(tmp_path / "sp"), "--rows",
                                   "baseline,hyper-es", "--fractions", "0.5,0.05", "--backend", "hf", "--limit", "8"])
    assert res.exit_code == 0, res.output
    sp = json.loads((tmp_path / "sp" / "sparsity.json").read_text())
    for row in ("baseline", "hyper-es", "base"):
        greedy = json.loads((run_dir / "eval" / f"{row}.json").read_text())["results"]["chain_sum"]["records"]["greedy"]
        got = sp["rows"]["baseline" if row == "base" else row]["accuracy"]["p=0" if row == "base" else "p=1"]
        assert got["tasks"]["chain_sum"] == pytest.approx(sum(greedy[:8]) / 8)
        assert got["correct"]["chain_sum"] == [int(v) for v in greedy[:8]]
    assert set(sp["rows"]["baseline"]["accuracy"]) == {"p=0", "p=1", "p=0.5", "p=0.05"}
    assert sp["rows"]["hyper-es"]["accuracy"]["p=0"] == sp["rows"]["baseline"]["accuracy"]["p=0"]  # scored once
    assert sp["rows"]["baseline"]["layer_norms"] and (tmp_path / "sp" / "sparsity.png").stat().st_size > 0
    acc, cut = sp["rows"]["hyper-es"]["accuracy"], sp["rows"]["hyper-es"]["paired"]["p=0.5"]
    assert set(sp["rows"]["hyper-es"]["paired"]) == {"p=0.5", "p=0.05"} and cut["vs_full"]["n"] == 8
    assert cut["vs_full"]["diff"] == pytest.approx(acc["p=0.5"]["mean"] - acc["p=1"]["mean"])
    assert cut["vs_base"]["diff"] == pytest.approx(acc["p=0.5"]["mean"] - acc["p=0"]["mean"])
    assert cut["vs_full"]["low"] <= cut["vs_full"]["diff"] <= cut["vs_full"]["high"] and "− full" in res.output

    def no_engine(*a, **k):
        raise AssertionError("a measured row was scored again")

    with patch("hyper_es.engine.inplace_engine", no_engine):  # a re-run keeps the rows sparsity.json holds
        again = CliRunner().invoke(app, ["analyze", "sparsity", str(run_dir), "--out", str(tmp_path / "sp"), "--rows",
                                         "baseline,hyper-es", "--fractions", "0.5,0.05", "--backend", "hf", "--limit", "8"])
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "sp" / "sparsity.json").read_text())["rows"] == sp["rows"]
    bad = CliRunner().invoke(app, ["analyze", "sparsity", str(run_dir), "--out", str(tmp_path / "x"), "--rows", "nope"])
    assert bad.exit_code == 2 and "no adapter for row 'nope'" in bad.output


def test_decide_save_adds_a_newer_row_to_a_finished_stages_record(tiny_run, tmp_path):
    """`bench/decide.py --save` on a stage rebuilt here: a row the committed record lacks (a newer row kind) is added,
    and the committed report is made again from the committed artefacts, so each cost stays the one measured."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import decide

    recipe, run_dir, report = tiny_run
    dest = tmp_path / "committed"
    decide.copy_artefacts(run_dir, dest)
    (dest / "eval" / "search-start.json").unlink()  # recorded before the row existed
    old = json.loads((dest / "report.json").read_text())
    old["rows"] = [r for r in old["rows"] if r["name"] != "search-start"]
    (dest / "report.json").write_text(json.dumps(old))
    manifest = dest / "directions" / "dir-0" / "manifest.json"
    m = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**m, "wall_seconds": m["wall_seconds"] + 1000.0}))  # measured on another machine
    decide.add_rows(run_dir, dest)
    again = json.loads((dest / "report.json").read_text())
    rows, here = {r["name"]: r for r in again["rows"]}, {r["name"]: r for r in report["rows"]}
    assert list(rows) == list(here) and (dest / "eval" / "search-start.json").is_file()
    assert rows["search-start"]["wall_s"] == pytest.approx(here["search-start"]["wall_s"] + 1000.0)  # committed times
    assert all(rows[n]["results"] == here[n]["results"] for n in rows)
    decide.add_rows(run_dir, dest)  # nothing left to add: the record stays as it is
    assert json.loads((dest / "report.json").read_text()) == again


def test_decide_save_keeps_the_first_measured_jobs_of_a_resumed_stage(tiny_run, tmp_path):
    """A stage resumed on another machine retrains its jobs bit for bit: `--save` keeps the manifests first
    measured (and makes the report from them), but takes a job that is not the same one."""
    import shutil
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import decide

    recipe, run_dir, report = tiny_run
    first, here = tmp_path / "committed", tmp_path / "here"
    decide.copy_artefacts(run_dir, first)
    shutil.copytree(first, here)
    rel = Path("directions/dir-0/manifest.json")
    m = json.loads((here / rel).read_text())
    (here / rel).write_text(json.dumps({**m, "wall_seconds": m["wall_seconds"] + 500.0}))  # the retrain's time
    geometry = (first / "geometry.json").read_text()
    (here / "geometry.json").write_text(json.dumps({"retrained": True}))  # a retrain's last digits
    decide.copy_artefacts(here, first)
    assert json.loads((first / rel).read_text()) == m and (first / "geometry.json").read_text() == geometry
    rows = {r["name"]: r["wall_s"] for r in json.loads((first / "report.json").read_text())["rows"]}
    assert rows == {r["name"]: r["wall_s"] for r in report["rows"]}
    (here / rel).write_text(json.dumps({**m, "reward_curve": [0.0] * len(m["reward_curve"])}))  # another job
    decide.copy_artefacts(here, first)
    assert json.loads((first / rel).read_text())["reward_curve"] == [0.0] * len(m["reward_curve"])
