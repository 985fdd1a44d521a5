"""The gradient-fitted control (`gradfit:`): the merged model as parametrizations equals the search's merge, the
gradient reaches the coefficients only, and a fit on the tiny model moves them inside the bounds within its budget."""

import json

import numpy as np
import pytest
import torch

import hyper_es as hx
from hyper_es import models
from hyper_es.directions import DirectionSet
from hyper_es.merging import MergePlan, recipe_genome
from hyper_es.search.grad_fit import fit, merged_parameters

from test_search_run import small_search_recipe  # noqa: E402  (tests/ is on sys.path under pytest)


def plan_and_model(recipe, run):
    ds = DirectionSet.from_run(run)
    genome, settings = recipe_genome(recipe, ds)
    model, tok = models.load(recipe.model.name, dtype="float32")
    return genome, MergePlan(ds, genome, settings), model, tok


def test_parametrized_model_is_the_search_merge_and_only_the_coefficients_learn(tmp_path):
    recipe = small_search_recipe(tmp_path)
    genome, plan, model, tok = plan_and_model(recipe, tmp_path / "run")
    x0 = np.linspace(-0.5, 1.5, genome.size)
    merged = plan.apply(model.state_dict(), x0)
    reference, _ = models.load(recipe.model.name, dtype="float32")
    reference.load_state_dict(merged)
    x = merged_parameters(model, plan, x0)
    ids = tok("12 + 7 =", return_tensors="pt").input_ids
    assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-5)
    assert [p is x for p in model.parameters() if p.requires_grad] == [True]
    model(ids).logits.float().pow(2).mean().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    with torch.no_grad():  # generation merges once per call, with the current coefficients
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
        again = reference.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.tolist() == again.tolist()


def test_fit_moves_the_coefficients_within_bounds_and_budget_and_is_read_back(tmp_path):
    recipe = small_search_recipe(tmp_path, gradfit={"learning_rate": 0.2, "max_steps": 3, "max_tokens": 10_000})
    run = tmp_path / "run"
    result = fit(recipe, run)
    genome, x = hx.Genome.from_json(run / "gradfit" / "best.json")
    lo, hi = genome.lower_upper()
    assert 1 <= result["steps"] <= 3 and result["token_curve"][-1][1] == result["cost"]["total"]["train_tokens"] > 0
    assert np.all(x >= lo) and np.all(x <= hi) and not np.allclose(x, result["x0"])
    assert x.tolist() == result["x"] and result["x0"] == genome.initial(recipe.search.x0).tolist()
    assert fit(recipe, run) == result  # a finished fit is read back, not run again
    small = small_search_recipe(tmp_path, gradfit={"learning_rate": 0.2, "max_steps": 50, "max_tokens": 1})
    (run / "gradfit" / "result.json").unlink()
    assert fit(small, run)["steps"] == 1  # the budget: one step's tokens already reach it
    timed = small_search_recipe(tmp_path, gradfit={"max_steps": 50, "budget": "seconds"})
    (run / "gradfit" / "result.json").unlink()
    from hyper_es.search import grad_fit

    search = {"cost": {"total": {"search_tokens": 10**9, "select_tokens": 0, "seconds": 1e-3}}}
    assert grad_fit.budget(timed, search, run) == (None, 1e-3)
    (run / "search").mkdir(exist_ok=True)
    (run / "search" / "result.json").write_text(json.dumps(search))
    assert fit(timed, run)["steps"] == 1  # the search's wall time: spent within the first step


def test_gradfit_needs_a_search_to_match_or_a_budget(tmp_path):
    recipe = small_search_recipe(tmp_path, gradfit={})
    with pytest.raises(hx.errors.DataError, match="no finished search .* set gradfit.max_tokens"):
        fit(recipe, tmp_path / "run")
    data = json.loads(json.dumps(recipe.model_dump(mode="json")))
    data["merge"]["per_layer_density"] = True
    with pytest.raises(Exception, match="gradfit: it fits the merge coefficients"):
        hx.recipe.recipe_from_dict(data, "r.yaml")

