"""`hyper-es compare` end to end on the tiny model (HF backend), two seeds: the lr grid, the main run on the grid's
baseline, a variant, grpo-equal-compute, the summary with the grid charged; then killed (SIGKILL) mid-stage and
resumed to the same summary. And the recipe's `compare:` section refused where it cannot work."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hyper_es.compare.grid import overlay
from hyper_es.compare.equal import equal_overlay
from hyper_es.compare.run import EQUAL, arm_recipe, compare, plan_for, same_baseline, variants
from hyper_es.errors import RecipeError
from hyper_es.recipe import recipe_from_dict
from recipes import tiny_data, tiny_recipe

ROOT = Path(__file__).resolve().parents[1]
COST = ("steps", "train_tokens", "search_tokens", "select_tokens", "tokens")  # wall seconds differ run to run


def _data() -> dict:
    return tiny_data({  # the task's reward: a coin flip per sampled completion, so rows differ as real ones do
        "tasks.0.reward": "dense_reward:even_length", "tasks.0.test.limit": 8, "tasks.0.val.size": 8,
        "gradient": {"directions": 2, "steps": 1, "learning_rate": 0.01, "directions_from": "snapshots"},
        "search": {"popsize": 2, "max_generations": 2, "scale_scan": [0.5, 1.0]},
        "fitness": {"minibatch": 4, "val_size": 8, "rescore_top": 1}, "eval": {"k": [1], "limit": 8},
        "compare": {"lrs": [0.005, 0.01], "max_lrs": 2, "equal_max_batches": 4,
                    "variants": {"linear": {"merge": {"method": "task_arithmetic", "density": 1.0}},
                                 "es": {"method": "es", "es": {"population": 2, "iterations": 1, "sigma": 0.05}}}}})


def _recipe(folder: Path):
    return tiny_recipe(folder, _data(), write=True)


def _numbers(summary: dict) -> dict:
    """What must not depend on a kill: every row's accuracy and generated tokens, every pair's differences."""
    rows = {s: {label: {k: r[k] for k in (*COST, "greedy", "trained", "val")} for label, r in e["rows"].items()}
            for s, e in summary["seeds"].items()}
    return {"rows": rows, "vs": {s: e["vs"] for s, e in summary["seeds"].items()}, "pooled": summary["pooled"]}


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    recipe = _recipe(folder)
    summary, text = compare(recipe, [0, 1], folder / "A", figure=False)
    return recipe, folder, summary, text


def test_compare_runs_every_stage_and_charges_the_grid(whole):
    recipe, folder, summary, text = whole
    root = folder / "A"
    for seed in (0, 1):
        grid = json.loads((root / f"seed{seed}" / "lr_grid.json").read_text())
        assert sorted(grid["lrs"]) == ["0.005", "0.01"] and grid["chosen"] in (0.005, 0.01)
        main = root / f"seed{seed}" / "main"
        chosen = root / f"seed{seed}" / "grid" / f"lr{grid['chosen']:g}" / "directions" / "baseline"
        assert (main / "directions" / "baseline" / "manifest.json").stat().st_ino == \
            (chosen / "manifest.json").stat().st_ino  # the grid's run at the chosen lr, not trained again
        report = {r["name"]: r for r in json.loads((main / "report.json").read_text())["rows"]}
        rows = summary["seeds"][seed]["rows"]
        other = grid["lrs"]["0.01" if grid["chosen"] == 0.005 else "0.005"]
        extra = other["train"]["tokens"] + other["validation"]["tokens"]
        assert extra > 0 and rows["base"]["tokens"] == report["base"]["tokens"] == 0  # the base used no lr
        for label in ("baseline", "scaled", "hyper-es"):  # trained at the chosen lr: the grid's other lr charged
            assert rows[label]["tokens"] == report[label]["tokens"] + extra, label
        assert rows["hyper-es-linear"]["name"] == "hyper-es" and "grpo-equal-compute" in rows
        equal = json.loads((root / f"seed{seed}" / "equal" / "equal_compute.json").read_text())
        assert equal["budget_tokens"] == report["hyper-es"]["tokens"] and equal["accumulation"] >= 1
        es = yaml.safe_load((root / f"seed{seed}" / "es" / "recipe.yaml").read_text())["es"]
        assert es["max_tokens"] == report["hyper-es"]["tokens"]  # ES given the Hyper-ES row's generated tokens
        variant = root / f"seed{seed}" / "linear"
        assert (variant / "directions" / "baseline" / "manifest.json").stat().st_ino == \
            (main / "directions" / "baseline" / "manifest.json").stat().st_ino  # the same baseline job, shared
    pooled = summary["pooled"]
    assert set(pooled) >= {"hyper-es - grpo-equal-compute", "hyper-es-linear - scaled", "es - grpo-equal-compute"}
    assert all(summary["seeds"][s]["rows"]["es"]["name"] == "es" for s in (0, 1))  # the ES arm's own row
    assert pooled["hyper-es - scaled"]["trained"]["seeds"] == [0, 1]
    assert any(g.get("pass@1", {}).get("diff") for g in pooled.values())  # sampled rows differ: resuming can show
    assert "hyper-es - grpo-equal-compute" in text and "lr grid's other lrs" in text
    again = subprocess.run([sys.executable, "-m", "hyper_es", "report", str(root), "--no-figure"], capture_output=True,
                           text=True, check=True)  # rendered again from disk alone: the same summary
    assert again.stdout == text and json.loads((root / "summary.json").read_text())["pooled"] == \
        json.loads(json.dumps(pooled))


def test_compare_killed_mid_stage_resumes_to_the_same_summary(whole):
    recipe, folder, summary, _ = whole
    root = folder / "B"
    shutil.copytree(folder / "A" / "seed0", root / "seed0")  # seed 0 done; seed 1 is run, killed and resumed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT)])}
    proc = subprocess.Popen([sys.executable, "-m", "hyper_es", "compare", str(folder / "recipe.yaml"), "--out",
                             str(root), "--seeds", "0,1", "--no-figure"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    mark = root / "seed1" / "main" / "search" / "checkpoint.json"  # the main run's search, after generation 1
    deadline = time.monotonic() + 300
    while not mark.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL and mark.is_file()
    assert not (root / "seed1" / "equal").exists()  # killed before the last stage
    resumed, _ = compare(recipe, [0, 1], root, figure=False)
    assert _numbers(json.loads(json.dumps(resumed))) == _numbers(json.loads(json.dumps(summary)))


def test_a_variant_that_makes_no_valid_recipe_is_refused_naming_it(tmp_path):
    data = _data()
    data["compare"]["variants"] = {"dense": {"merge": {"method": "task_arithmetic", "density": 0.5}}}
    with pytest.raises(RecipeError, match=r"compare\.variants\.dense: merge"):
        variants(recipe_from_dict(data, tmp_path / "r.yaml"))
    data["compare"] = {"variants": {"main": {}}}
    with pytest.raises(RecipeError, match=r"compare\.variants.*not one of main"):
        recipe_from_dict(data, tmp_path / "r.yaml")
    data["compare"] = {"transfer": "chain_sum"}  # trained on: not a transfer task
    with pytest.raises(RecipeError, match=r"compare\.transfer: 'chain_sum'"):
        recipe_from_dict(data, tmp_path / "r.yaml")


def test_a_composition_plan_has_the_adapters_alone_and_no_steps_goal():
    given = overlay(_data(), {"directions": {"adapters": ["ads/letters", {"path": "ads/x", "name": "sums"}],
                                             "baseline": True}, "gradient.directions_from": "jobs",
                        "eval.merges": ["ties"], "gradfit": {}})
    plan = plan_for(recipe_from_dict(given))
    assert plan.controls == ["baseline-best", "scaled", "letters", "sums", "uniform", "merge-ties", "grad-fit",
                             "grpo-equal-compute"]
    assert plan.rows["sums"] == ("main", "sums") and ("hyper-es", "letters") in plan.all_pairs()
    assert sorted(plan.tuned) == ["baseline", "baseline-best", "grpo-equal-compute", "scaled"]  # the grid trains those
    assert plan.goal.steps_ratio is None and plan_for(recipe_from_dict(_data())).goal.steps_ratio == 0.9
    for taken in ("scaled", "merge-ties", "uniform", "hyper-es-start"):
        given["directions"]["adapters"][1]["name"] = taken
        with pytest.raises(RecipeError, match=f"'{taken}' names two rows of the comparison"):
            plan_for(recipe_from_dict(given))


def test_overlays_and_what_shares_the_baseline():
    data = {"gradient": {"vary": ["seed"], "steps": 2}, "coevolve": None}
    assert overlay(data, {"gradient.vary": ["difficulty"], "coevolve": {"population": 4}}) == {
        "gradient": {"vary": ["difficulty"], "steps": 2}, "coevolve": {"population": 4}}
    assert data["gradient"]["vary"] == ["seed"]  # the recipe itself is left as it was
    main = recipe_from_dict(_data())
    merged = recipe_from_dict(overlay(_data(), {"merge.method": "task_arithmetic"}))
    assert same_baseline(main, merged)
    assert not same_baseline(main, recipe_from_dict(overlay(_data(), {"gradient.batch_size": 4})))
    plan = plan_for(main)
    assert plan.controls == ["baseline-best", "scaled", "grpo-equal-compute"] and "base" not in plan.tuned
    assert ("hyper-es-linear", "hyper-es-linear-start") in plan.pairs
    fitted = plan_for(recipe_from_dict(overlay(_data(), {"gradfit": {}, "eval.merges": ["ties"],
                                                         "search.scale_scan": [0.5, 1.0]})))
    assert fitted.controls == ["baseline-best", "scaled", "merge-ties", "grad-fit", "grpo-equal-compute"]
    assert fitted.rows["grad-fit"] == ("main", "grad-fit") and ("hyper-es-start", "grad-fit") in fitted.pairs
    plan = {"steps": 2, "accumulation": 3, "snapshot_every": 1, "micro": 1}  # the equal arm has no search: no merges
    equal = arm_recipe(recipe_from_dict(overlay(_data(), {"gradfit": {}, "eval.merges": ["ties"]})), 0, 0.01, EQUAL,
                       equal_overlay(plan))
    assert equal.eval.merges == [] and equal.gradfit is None and equal.gradient.accumulation_steps == 3
    es = plan_for(recipe_from_dict(overlay(_data(), {"compare.variants": {
        "es": {"method": "es"}, "late": {"method": "es", "es": {"start": "baseline"}}}})))
    assert es.methods == ["hyper-es", "hyper-es-linear", "es", "es-late"] and es.rows["es"] == ("es", "es")
    assert es.rows["es-late"] == ("late", "baseline+es") and "es-start" not in es.rows
    assert ("es", "grpo-equal-compute") in es.all_pairs() and ("es-late", "base") in es.all_pairs()


def test_the_equal_and_further_arms_keep_the_baselines_micro_batches(tmp_path):
    """A baseline whose batch is accumulated micro-batches (batch_size 4 x accumulation_steps 2): the equal-compute
    plan counts whole batches and records the baseline's 2 micro-batches, so its arms accumulate 2 for each of the
    plan's batches, as the baseline did; a plan kept before it recorded them takes them from the baseline's manifest."""
    from hyper_es.compare.further import further_changes
    from hyper_es.compare.run import MAIN, equal_recipe

    recipe = recipe_from_dict(overlay(_data(), {"gradient.batch_size": 4, "gradient.accumulation_steps": 2}))
    (tmp_path / MAIN / "directions" / "baseline").mkdir(parents=True)
    (tmp_path / MAIN / "directions" / "baseline" / "manifest.json").write_text(json.dumps({
        "name": "baseline", "job": {}, "base": {"name": "m", "sha256": "0"}, "optimizer_steps": 1, "completions": 16,
        "tokens": 100, "reward_curve": [], "wall_seconds": 2.0, "grpo": {"batch_size": 4, "accumulation_steps": 2}}))
    (tmp_path / MAIN / "report.json").write_text(json.dumps({"rows": [{"name": "hyper-es", "tokens": 300,
                                                                        "wall_s": 6.0}]}))
    equal = equal_recipe(recipe, tmp_path, 0, 0.01)  # 300 tokens (6 s) at 100 (2 s) a batch: 3 batches in its step
    plan = json.loads((tmp_path / EQUAL / "equal_compute.json").read_text())
    assert (plan["accumulation"], plan["micro"]) == (3, 2)
    assert (equal.gradient.batch_size, equal.gradient.accumulation_steps) == (4, 6)
    assert further_changes({"adapter": "x"}, plan)["gradient"]["accumulation_steps"] == 6
    del plan["micro"]
    (tmp_path / EQUAL / "equal_compute.json").write_text(json.dumps(plan))
    assert equal_recipe(recipe, tmp_path, 0, 0.01).gradient.accumulation_steps == 6


def test_arms_runs_only_those_stages_after_the_grid(tmp_path, monkeypatch):
    import hyper_es.compare as summary
    import hyper_es.compare.run as run

    recipe = recipe_from_dict(_data(), tmp_path / "r.yaml")
    with pytest.raises(RecipeError, match=r"no arm mian in this comparison \(expected some of main, linear, es, "):
        compare(recipe, [0], tmp_path / "A", arms=["mian"])
    assert not (tmp_path / "A").exists()  # refused before anything is written
    ran = []
    monkeypatch.setattr(run, "tune_seed", lambda recipe, out, seed: {"chosen": 0.01})
    monkeypatch.setattr(run, "run_main", lambda *a: ran.append(("main", a[2])))
    monkeypatch.setattr(run, "run_equal", lambda *a: ran.append(("equal", a[2])))
    monkeypatch.setattr(summary, "render", lambda out, seeds, figure=True: ({}, ""))
    compare(recipe, [0, 1], tmp_path / "A", arms=["equal"])
    assert ran == [("equal", 0), ("equal", 1)]


def test_the_cli_refuses_an_arm_it_does_not_have_in_one_line(tmp_path, cli):
    tiny_recipe(tmp_path, _data(), write=True)
    result = cli("compare", tmp_path / "recipe.yaml", "--out", tmp_path / "A", "--arms", "equal, further")
    assert result.exit_code != 0
    assert "no arm further in this comparison (expected some of main, linear, es, equal)" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "A").exists()
