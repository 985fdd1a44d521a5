"""The tests' one recipe builder (tests/helpers/recipes.py): overlays merge into the base as the toolkit's do."""

import pytest

from recipes import DENSE, SMALL_SEARCH, VAL, tiny_data, tiny_recipe


def test_the_builder_lays_an_overlay_over_a_base_and_validates_it(tmp_path):
    data = tiny_data({"gradient.steps": 5, "tasks.0.val": VAL, "tasks.0.test.limit": 4, "eval": {"k": [1, 2]}})
    assert data["gradient"]["steps"] == 5 and data["gradient"]["batch_size"] == 8  # merged, the rest kept
    assert VAL.items() <= data["tasks"][0]["val"].items() and data["tasks"][0]["test"]["limit"] == 4  # merged
    assert data["eval"]["backend"] == "hf" and data["eval"]["k"] == [1, 2]
    assert tiny_data(base="dense") == DENSE and tiny_data(base="dense") is not DENSE  # a copy, not the base
    recipe = tiny_recipe(tmp_path, SMALL_SEARCH, base="dense", write=True)
    assert (tmp_path / "recipe.yaml").is_file() and recipe.fitness.val_size == 8 and recipe.gradient.directions == 2
    with pytest.raises(Exception, match="fitness.minibatch"):
        tiny_recipe(tmp_path, {"fitness.minibatch": 0})
