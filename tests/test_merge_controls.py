"""The composition controls in a run. `eval.merges`: each merge-<method> row is the search directions merged by the
method at mergekit's defaults, times one lambda chosen on validation from search.scale_scan; charged the directions
and its scan; its update is that merge at that lambda. `gradfit:`: the grad-fit row (tests/test_grad_fit.py tests
the fit itself)."""

import json

import pytest
import torch

import hyper_es as hx
from hyper_es.directions import DirectionSet
from hyper_es.merging import MergePlan, recipe_genome
from hyper_es.rows import jobs_cost, row_update

from test_search_run import small_search_recipe  # noqa: E402  (tests/ is on sys.path under pytest)


def test_merge_rows_and_the_grad_fit_row_are_evaluated_charged_and_rebuilt(tmp_path):
    """One `hyper-es run` with both controls: the search, the fit (matched to the search's tokens), then the final
    evaluation with the merge-<method> rows (each lambda scanned on validation) and the grad-fit row (merged as the
    search merges), each charged as documented, and each update rebuilt by row_update."""
    from hyper_es.pipeline import run

    scales = [0.5, 1.0, 2.0]
    recipe = small_search_recipe(tmp_path, **{"eval.merges": ["task_arithmetic", "ties"], "eval.k": [1],
                                              "search.scale_scan": scales, "search.x0": "ones",
                                              "gradfit": {"learning_rate": 0.2, "max_steps": 2}})
    report = run(recipe, tmp_path / "run", backend="hf")
    rows = {r["name"]: r for r in report["rows"]}
    dirs = jobs_cost(tmp_path / "run", ["dir-0", "dir-1"])
    val = tmp_path / "run" / "eval" / "val"
    for method in ("task_arithmetic", "ties"):
        name = f"merge-{method}"
        chosen = json.loads((val / f"{name}.json").read_text())
        assert chosen["scale"] in scales and all((val / f"{name}@{s:g}.json").is_file() for s in scales)
        row = rows[name]
        assert row["kind"] == "merge" and row["val"]["mean"] == chosen["mean"] and "pass@1" not in row["mean"]
        assert row["select_tokens"] == chosen["tokens"] > 0 and row["train_tokens"] == dirs.train_tokens
        update = row_update(tmp_path / "run", name, recipe)
        unit = hx.merging.unit_merge(DirectionSet.from_run(tmp_path / "run"), method)
        assert update.keys() == unit.keys()
        assert all(torch.equal(update[t], chosen["scale"] * unit[t]) for t in update)
    fitted = json.loads((tmp_path / "run" / "gradfit" / "result.json").read_text())
    search = json.loads((tmp_path / "run" / "search" / "result.json").read_text())["cost"]["total"]
    assert fitted["budget"] == search["search_tokens"] + search["select_tokens"]  # equal tokens by default
    grad = rows["grad-fit"]  # the directions, the scan that chose its start, the fit
    assert grad["train_tokens"] == dirs.train_tokens + fitted["cost"]["total"]["train_tokens"]
    assert grad["search_tokens"] == json.loads((tmp_path / "run" / "search" / "scale_scan.json").read_text())["tokens"]
    assert grad["optimizer_steps"] == dirs.steps + fitted["steps"] and "pass@1" in grad["mean"]
    genome, x = hx.Genome.from_json(tmp_path / "run" / "gradfit" / "best.json")
    ds = DirectionSet.from_run(tmp_path / "run")
    expected = dict(MergePlan(ds, genome, recipe_genome(recipe, ds)[1]).deltas(x))
    update = row_update(tmp_path / "run", "grad-fit", recipe)
    assert update.keys() == expected.keys() and all(torch.equal(update[t], expected[t].float()) for t in update)
    ta = hx.merging.unit_merge(DirectionSet.from_run(tmp_path / "run"), "task_arithmetic")
    ds = DirectionSet.from_run(tmp_path / "run")
    assert all(torch.allclose(ta[t], ds.delta(0, t) + ds.delta(1, t)) for t in ta)  # weight 1 each, no normalising


def test_merges_need_a_scale_scan_and_known_methods(tmp_path):
    with pytest.raises(Exception, match="eval.merges: a merge-<method> row scales"):
        small_search_recipe(tmp_path, **{"eval.merges": ["ties"]})
    with pytest.raises(Exception, match="eval.merges: expected distinct methods"):
        small_search_recipe(tmp_path, **{"eval.merges": ["slerp"], "search.scale_scan": [0.5, 1.0]})
