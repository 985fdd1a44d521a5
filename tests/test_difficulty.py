"""`gradient.vary: difficulty` and `task`: the plan, the bins by base pass rate, and one measurement with the engine
(HF, tiny model) feeding short GRPO-LoRA jobs."""

import json

import pytest
import yaml

import hyper_es as hx
from hyper_es.directions.collect import collect
from hyper_es.directions.difficulty import difficulty_bin, difficulty_path, read_difficulty
from hyper_es.directions.jobs import plan_directions
from hyper_es.errors import DataError, HyperESError, RecipeError
from hyper_es.evaluate.pass_rates import measure_difficulty
from recipes import tiny_data


def two_task_recipe(folder, **gradient):
    data = tiny_data({"model.dtype": "float32", "eval": {"backend": "hf"}, "gradient": gradient}, base="dense")
    other = json.loads(json.dumps(data["tasks"][0]))
    other["name"], other["train"]["seed"] = "chain_sum_b", 7
    data["tasks"].append(other)
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return hx.load_recipe(path)


def test_plan_difficulty_bins_within_each_task(tmp_path):
    recipe = two_task_recipe(tmp_path, directions=4, vary=["difficulty", "task"])
    jobs = plan_directions(recipe)
    assert [(j.task, j.shard, j.num_shards, j.by_difficulty) for j in jobs] == [
        ("chain_sum", 0, 2, True), ("chain_sum", 1, 2, True), ("chain_sum_b", 0, 2, True), ("chain_sum_b", 1, 2, True)]
    assert "task" in jobs[0].to_dict() and "task" not in plan_directions(two_task_recipe(tmp_path))[0].to_dict()
    with pytest.raises(RecipeError, match="gradient.directions.*multiple of 2, got 3"):
        two_task_recipe(tmp_path, directions=3, vary=["task"])
    with pytest.raises(RecipeError, match="difficulty and shard"):
        two_task_recipe(tmp_path, vary=["difficulty", "shard"])
    with pytest.raises(RecipeError, match="snapshots.*cannot split"):
        two_task_recipe(tmp_path, vary=["difficulty"], directions_from="snapshots")


def test_bins_are_ordered_by_pass_rate_hardest_first():
    rows = [{"id": str(i)} for i in range(10)]
    rates = {"t": {str(i): r for i, r in enumerate([1.0, 0.0, 0.5, 0.25, 0.75, 0.0, 1.0, 0.5, 0.25, 0.75])}}
    del rates["t"]["9"]  # 9 measured rows (row 9 was not measured): bins of 3
    bins = [difficulty_bin(rows, rates, "t", k, 3) for k in range(3)]
    assert [len(b) for b in bins] == [3, 3, 3]
    got = [[rates["t"][r["id"]] for r in b] for b in bins]
    assert got[0][:2] == [0.0, 0.0] and got[0][2] == 0.25 and got[2] == [0.75, 1.0, 1.0]
    assert sorted(r["id"] for b in bins for r in b) == sorted(rates["t"])
    assert [len(difficulty_bin(rows, rates, "t", k, 4)) for k in range(4)] == [3, 2, 2, 2]
    with pytest.raises(DataError, match="no pass rates for task 'x'"):
        difficulty_bin(rows, rates, "x", 0, 2)
    with pytest.raises(DataError, match="1 row ids are not in the train split"):
        difficulty_bin(rows[:8], rates, "t", 0, 2)


def test_measure_once_then_train_each_bin(tmp_path):
    recipe = two_task_recipe(tmp_path, directions=4, vary=["difficulty", "task"], steps=1, difficulty_rows=8,
                             difficulty_samples=2)
    run = tmp_path / "run"
    with pytest.raises(HyperESError, match="needs the base pass rates"):
        collect(recipe, run)
    calls = []
    folders = collect(recipe, run, measure=lambda r, d: calls.append(measure_difficulty(r, d)))
    data = json.loads(difficulty_path(run).read_text())
    assert calls == [difficulty_path(run)] and data["backend"] == "hf" and data["tokens"] > 0
    assert {t: len(v) for t, v in data["pass_rate"].items()} == {"chain_sum": 8, "chain_sum_b": 8}
    assert all(v in (0.0, 0.5, 1.0) for rates in data["pass_rate"].values() for v in rates.values())
    manifests = [json.loads((f / "manifest.json").read_text()) for f in folders]
    assert [(m["tasks"], m["train_rows"], m["job"]["shard"]) for m in manifests] == [
        (["chain_sum"], 4, 0), (["chain_sum"], 4, 1), (["chain_sum_b"], 4, 0), (["chain_sum_b"], 4, 1)]
    collect(recipe, run, measure=lambda r, d: calls.append("again"))  # finished: nothing measured or trained
    assert calls == [difficulty_path(run)]
    other = two_task_recipe(tmp_path, directions=4, vary=["difficulty", "task"], steps=1, difficulty_rows=8,
                            difficulty_samples=3)
    with pytest.raises(DataError, match="difficulty.json: settings: measured with"):
        read_difficulty(run, other)



def test_the_measurement_is_part_of_the_directions_cost(tmp_path):
    from hyper_es.cost import Cost
    from hyper_es.rows.charge import directions_cost, jobs_cost

    job = {"job": {}, "base": {"name": "m", "sha256": "0"}, "optimizer_steps": 6, "completions": 96, "tokens": 1000,
           "reward_curve": [], "wall_seconds": 10.0}
    for name in ("dir-0", "dir-1"):
        (tmp_path / "directions" / name).mkdir(parents=True)
        (tmp_path / "directions" / name / "manifest.json").write_text(json.dumps({**job, "name": name}))
    want = Cost(steps=12, train_tokens=2000, seconds=20.0)
    assert jobs_cost(tmp_path, ["dir-0", "dir-1"]) == directions_cost(tmp_path, ["dir-0", "dir-1"]) == want
    difficulty_path(tmp_path).write_text(json.dumps({"tokens": 500, "seconds": 3.0}))
    assert directions_cost(tmp_path, ["dir-0", "dir-1"]) == Cost(steps=12, train_tokens=2500, seconds=23.0)
