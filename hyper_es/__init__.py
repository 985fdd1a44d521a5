"""Hyper-ES: evolution strategies over a subspace of GRPO-LoRA directions.

    import hyper_es as hx
    recipe = hx.load_recipe("recipes/tiny.yaml")
    hx.rewards.get("math")(completion, "72")
"""

from hyper_es import rewards
from hyper_es.errors import DataError, HyperESError, RecipeError
from hyper_es.recipe import Recipe, load_recipe

__all__ = ["DataError", "HyperESError", "Recipe", "RecipeError", "load_recipe", "rewards"]
__version__ = "0.1.0"
