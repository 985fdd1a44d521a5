"""`hyper-es search` end to end on the tiny model with the HF in-place backend (fast), plus resume."""

import json

import hyper_es as hx
from hyper_es.directions.collect import collect
from hyper_es.search.run import search

from test_directions import write_recipe  # noqa: E402  (tests/ is on sys.path under pytest)


def test_search_writes_log_result_and_best_genome_and_resumes(tmp_path):
    recipe_path = write_recipe(tmp_path, directions=2, steps=2)
    data = hx.load_recipe(recipe_path).model_dump(mode="json")
    data["tasks"][0]["val"] = {"source": "reasoning_gym", "dataset": "chain_sum", "size": 8, "seed": 500000}
    data["tasks"][0]["test"]["limit"] = 8
    data["search"] = {"popsize": 4, "max_generations": 2, "minibatch": 4, "val_size": 8, "rescore_top": 1,
                      "sigma0": 0.5}
    data["merge"] = {"layer_group_size": 2}
    recipe = hx.recipe.recipe_from_dict(data, recipe_path)
    run = tmp_path / "run"
    collect(recipe, run)
    result = search(recipe, run, backend="hf")
    log = [json.loads(x) for x in (run / "search" / "generations.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in log] == [1, 2] and all(len(r["val"]) == 1 for r in log)
    assert all(r["tokens"] > 0 and r["generate_s"] > 0 and "merge_load_s" in r for r in log)
    assert set(result["rows"]) == {"base", "uniform", "hyper-es"}
    assert all(0 <= row["val"] <= 1 and 0 <= row["test"] <= 1 for row in result["rows"].values())
    genome, x = hx.Genome.from_json(run / "search" / "best.json")
    assert x is not None and genome.size == 2 * 2  # 2 layer groups (of 2 layers) × 2 directions
    again = search(recipe, run, backend="hf")  # resumes: budget already spent, same answer
    assert again["best_val_generation_entry"] == result["best_val_generation_entry"]
