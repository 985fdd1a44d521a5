"""`hyper-es search` end to end on the tiny model with the HF in-place backend (fast), plus resume."""

import json

import numpy as np
import pytest
import torch

import hyper_es as hx
from hyper_es.directions.collect import collect
from hyper_es.search.run import search

from recipes import SMALL_SEARCH, VAL, tiny_recipe  # noqa: E402  (tests/helpers is on sys.path: conftest)
from test_directions import write_recipe  # noqa: E402  (tests/ is on sys.path under pytest)


def small_search_recipe(tmp_path, **sections):
    """A 2-direction tiny recipe with 8 val and 8 test rows and a 2-generation search (`sections` added); its
    directions are collected into tmp_path/run once."""
    recipe = tiny_recipe(tmp_path, {**SMALL_SEARCH, "tasks.0.val": VAL, "tasks.0.test.limit": 8, **sections},
                         base="dense", write=True)
    if not (tmp_path / "run" / "directions").is_dir():
        collect(recipe, tmp_path / "run")
    return recipe


def test_search_writes_log_result_and_best_genome_and_resumes(tmp_path):
    recipe = small_search_recipe(tmp_path)
    run = tmp_path / "run"
    result = search(recipe, run, backend="hf")
    log = [json.loads(x) for x in (run / "search" / "generations.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in log] == [1, 2] and all(len(r["val"]) == 1 for r in log)
    assert all(r["tokens"] > 0 and r["generate_s"] > 0 and "merge_load_s" in r for r in log)
    assert set(result["rows"]) == {"base", "uniform", "x0", "hyper-es"}
    assert all(0 <= row["val"] <= 1 and 0 <= row["test"] <= 1 for row in result["rows"].values())
    assert all(len(r["val_per_row"]) == 8 and np.mean(r["val_per_row"]) == pytest.approx(r["val"])
               for r in result["rows"].values())  # one task: the mean over its rows is the score
    genome, x = hx.Genome.from_json(run / "search" / "best.json")
    assert x is not None and genome.size == 2 * 2  # 2 layer groups (of 2 layers) × 2 directions
    from hyper_es.rows import start_genome

    assert start_genome(run) is None  # no scale scan: no search-start row
    again = search(recipe, run, backend="hf")  # resumes: budget already spent, same answer
    assert again["best_val_generation_entry"] == result["best_val_generation_entry"]


def test_recommend_mean_without_rescores_under_a_token_budget(tmp_path):
    """search.recommend: mean with fitness.rescore_top: 0: no generation is re-scored on validation, the token
    budget ends the search, and the genome put to the guard is CMA-ES's mean after the last generation."""
    recipe = small_search_recipe(tmp_path, **{"search.recommend": "mean", "fitness.rescore_top": 0,
                                              "search.max_generations": 20, "search.max_tokens": 1})
    run = tmp_path / "run"
    result = search(recipe, run, backend="hf", score_test=False)
    log = [json.loads(x) for x in (run / "search" / "generations.jsonl").read_text().splitlines()]
    assert len(log) == 1 and log[0]["val"] == [] and log[0]["val_tokens"] == 0  # the budget: one generation
    assert result["stop"]["budget"].startswith("max_tokens 1 ")
    from hyper_es.search.driver import CMASearch

    genome, x = hx.Genome.from_json(run / "search" / "best.json")
    x0, (lo, hi) = genome.initial(recipe.search.x0, recipe.merge.density), genome.lower_upper()
    again = CMASearch(x0, 0.5, lower=lo, upper=hi, popsize=4, seed=0, out=run / "search")  # replayed from disk
    entry = result["best_val_generation_entry"]
    assert entry["recommend"] == "mean" and entry["x"] == again.recommendation().tolist() != x0.tolist()
    assert x.tolist() == (entry["x"] if result["guard"]["kept"] == "search" else x0.tolist())


def test_scale_scan_fixed_fitness_set_search_reward_and_guard(tmp_path, caplog):
    """Scale first (kept on disk, so a resumed search starts from the same point), one fixed fitness draw, a dense
    fitness reward, and the guard: on the random tiny model the exact reward is 0 everywhere on validation, so
    nothing beats x0 and x0 is returned."""
    recipe_path = write_recipe(tmp_path, directions=2, steps=2)
    data = hx.load_recipe(recipe_path).model_dump(mode="json")
    data["tasks"][0]["val"] = {"source": "reasoning_gym", "dataset": "chain_sum", "size": 8, "seed": 500000}
    data["tasks"][0]["test"]["limit"] = 4
    data["tasks"][0]["reward"] = "numeric"
    data["search"] = {"popsize": 4, "max_generations": 2, "x0": "ones", "scale_scan": [0.5, 1.0, 2.0]}
    data["fitness"] = {"minibatch": 4, "val_size": 8, "rescore_top": 1, "fitness_set": "fixed", "reward": "dense_reward:length_fraction"}
    recipe = hx.recipe.recipe_from_dict(data, recipe_path)
    run = tmp_path / "run"
    collect(recipe, run)
    with caplog.at_level("INFO"):
        result = search(recipe, run, backend="hf")
    scan = result["scale_scan"]
    assert scan["scales"] == [0.5, 1.0, 2.0] and scan["best_scale"] in scan["scales"]
    assert any(f > 0 for f in scan["fitness"])  # the dense fitness reward, not the exact one
    assert scan["x0"] == [scan["best_scale"]] * 8 and scan["sigma0"] == 0.75  # median spacing × RMS of ones
    log = [json.loads(x) for x in (run / "search" / "generations.jsonl").read_text().splitlines()]
    assert all(v["val"] == 0.0 for r in log for v in r["val"])  # validation keeps the exact task reward
    assert result["guard"]["kept"] == "x0" and result["rows"]["hyper-es"] == result["rows"]["x0"]
    _, x = hx.Genome.from_json(run / "search" / "best.json")
    assert x.tolist() == scan["x0"]
    assert any("validation guard" in r.message and "keeping x0" in r.message for r in caplog.records)
    (run / "search" / "result.json").unlink()
    again = search(recipe, run, backend="hf")  # resumes from scale_scan.json and the checkpoint
    assert again["scale_scan"] == scan and again["best_val_generation_entry"] == result["best_val_generation_entry"]
    # The search-start row: the scanned x0 without the search, merged as the search merges; costed as the
    # directions plus the scan.
    from hyper_es.directions.manifest import finished_jobs
    from hyper_es.evaluate.final import eval_set, plan_rows
    from hyper_es.cost import Cost
    from hyper_es.rows import KINDS, jobs_cost, row_update
    from hyper_es.rows.charge import Context

    start = next(r for r in plan_rows(run, *eval_set(run, load=False)[1:]) if r.name == "search-start")
    assert start.kind == "search-start" and start.searched[1].tolist() == scan["x0"] and not start.pass_k
    hyper, begin = row_update(run, "hyper-es", recipe), row_update(run, "search-start", recipe)  # guard kept x0
    assert hyper.keys() == begin.keys() and all(torch.equal(hyper[t], begin[t]) for t in hyper)
    dirs = [m["name"] for _, m in finished_jobs(run)]
    jobs = jobs_cost(run, dirs)
    cost = KINDS["search-start"].cost(run, {"name": "search-start", "steps": jobs.steps}, Context(dirs, scan=scan))
    assert cost == Cost(jobs.steps, jobs.train_tokens, scan["tokens"], 0, pytest.approx(jobs.seconds + scan["seconds"]))


def test_guard_keeps_the_search_only_when_it_beats_x0():
    from types import SimpleNamespace

    from hyper_es.search.start import guard

    scores = {0: SimpleNamespace(reward=0.5, per_row=[1, 0, 1, 0]), 1: SimpleNamespace(reward=0.75, per_row=[1, 1, 1, 0])}
    decision, _ = guard(lambda x: scores[x], 0, 1)
    assert decision["kept"] == "search" and decision["better_rows"] == 1 and decision["worse_rows"] == 0
    decision, _ = guard(lambda x: scores[x], 1, 0)
    assert decision["kept"] == "x0" and decision["worse_rows"] == 1
    decision, _ = guard(lambda x: scores[0], 0, 0)  # a tie is not a win
    assert decision["kept"] == "x0"


def test_scale_scan_ties_go_to_the_scale_nearest_one(tmp_path):
    from types import SimpleNamespace

    from hyper_es.search.start import scale_scan

    genome = hx.Genome(("a", "b"), 2)
    flat = scale_scan(lambda x: SimpleNamespace(reward=0.5, tokens=3), genome, genome.initial("ones"),
                      [0.25, 0.5, 1.5, 1.0], tmp_path / "flat")
    assert flat["best_scale"] == 1.0 and flat["evals"] == 4 and flat["tokens"] == 12
    peaked = scale_scan(lambda x: SimpleNamespace(reward=float(x[0] == 0.5), tokens=1), genome,
                        genome.initial("ones"), [0.25, 0.5, 1.0], tmp_path / "peaked")
    assert peaked["best_scale"] == 0.5 and peaked["x0"] == [0.5] * 4


def test_the_search_counts_every_token_its_engine_generates(tmp_path, monkeypatch):
    """Fitness (scale scan and generations) plus validation (re-scores, guard, rows) = every token generated."""
    from hyper_es.engine.hf import HFGenerator

    recipe_path = write_recipe(tmp_path, directions=2, steps=1)
    data = hx.load_recipe(recipe_path).model_dump(mode="json")
    data["tasks"][0]["val"] = {"source": "reasoning_gym", "dataset": "chain_sum", "size": 8, "seed": 500000}
    data["search"] = {"popsize": 4, "max_generations": 2, "x0": "ones", "scale_scan": [0.5, 1.0]}
    data["fitness"] = {"minibatch": 4, "val_size": 8, "rescore_top": 2, "reward": "dense_reward:length_fraction"}
    recipe = hx.recipe.recipe_from_dict(data, recipe_path)
    collect(recipe, tmp_path / "run")
    generated, original = [0], HFGenerator.generate

    def counting(self, prompts, sampling, seeds=None):
        out = original(self, prompts, sampling, seeds)
        generated[0] += sum(len(c) for cs in out for c in cs)
        return out

    monkeypatch.setattr(HFGenerator, "generate", counting)
    result = search(recipe, tmp_path / "run", backend="hf", score_test=False)
    log = [json.loads(x) for x in (tmp_path / "run/search/generations.jsonl").read_text().splitlines()]
    fitness = sum(r["tokens"] for r in log) + result["scale_scan"]["tokens"]
    cost, phases = result["cost"]["total"], result["cost"]["phases"]
    assert cost["search_tokens"] == fitness and phases["scan"]["search_tokens"] == result["scale_scan"]["tokens"]
    assert cost["select_tokens"] > phases["generations"]["select_tokens"] == sum(r["val_tokens"] for r in log) > 0
    assert cost["search_tokens"] + cost["select_tokens"] == generated[0]  # the guard's and the rows' included
    assert cost["seconds"] == pytest.approx(sum(p["seconds"] for p in phases.values()))
    assert all(p["seconds"] > 0 for k, p in phases.items() if k != "proposals")


def test_a_race_that_settles_nothing_is_the_search_without_one(tmp_path):
    """fitness.race with delta 0 (every candidate promoted) gives the search without a race: the same candidates,
    fitness and tokens every generation, and a `race` record per generation that scored every row."""
    import shutil

    recipe = small_search_recipe(tmp_path, **{"fitness.minibatch": 6})
    plain = search(recipe, tmp_path / "run", backend="hf", score_test=False)
    raced_recipe = recipe.model_copy(deep=True)
    raced_recipe.fitness.race = {"rungs": [2, 4], "delta": 0}
    (tmp_path / "raced").mkdir()
    shutil.copytree(tmp_path / "run" / "directions", tmp_path / "raced" / "directions")
    raced = search(raced_recipe, tmp_path / "raced", backend="hf", score_test=False)

    def log(run):
        return [json.loads(x) for x in (tmp_path / run / "search" / "generations.jsonl").read_text().splitlines()]

    for a, b in zip(log("run"), log("raced"), strict=True):
        assert a["best_x"] == b["best_x"] and a["tokens"] == b["tokens"] and a["mean"] == pytest.approx(b["mean"])
        assert b["race"]["rungs"] == [2, 4, 6] and b["race"]["evaluations"] == b["race"]["full"] == 4 * 6
        assert b["race"]["tiers"] == ["raced"] * 4 and b["race"]["rows"] == [6] * 4
        assert [len(r) for r in a["per_row"]] == [6] * 4 and sorted(map(sorted, a["per_row"])) == sorted(
            map(sorted, b["per_row"]))  # each candidate's rewards per row (a race logs them in its rungs' order)
    from hyper_es.rundir import CHECKPOINT_FILE

    told = [json.loads((tmp_path / run / "search" / CHECKPOINT_FILE).read_text()) for run in ("run", "raced")]
    assert told[0]["candidates"] == told[1]["candidates"]  # pycma told the same ranking: the same candidates
    assert np.allclose(told[0]["scores"], told[1]["scores"], atol=1e-12)
    assert raced["best_val_generation_entry"]["x"] == plain["best_val_generation_entry"]["x"]
