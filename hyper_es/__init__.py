"""Hyper-ES: evolution strategies over a subspace of GRPO-LoRA directions.

    import hyper_es as hx
    recipe = hx.load_recipe("recipes/tiny.yaml")
    ds = hx.DirectionSet.from_adapters(base="tiny-random", adapters=["dir1", "dir2"])
    result = hx.search_merge(ds, tasks=["chain_sum"], out="RUN")   # CMA-ES over layer-wise coefficients
    result.export_hf("merged")
    report = hx.compose(ds, tasks=["chain_sum"], out="RUN2", gradfit={})  # the search beside its controls
    hx.rewards.get("math")(completion, "72")
"""

from hyper_es import rewards
from hyper_es.errors import DataError, HyperESError, RecipeError
from hyper_es.recipe import Recipe, load_recipe

__all__ = ["DirectionSet", "Genome", "SearchResult", "compose", "merge", "search_merge", "DataError", "HyperESError", "Recipe", "RecipeError", "load_recipe", "rewards"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Torch-backed names load on first use, so `import hyper_es` stays light (rewards, recipes).
    if name == "DirectionSet":
        from hyper_es.directions import DirectionSet

        return DirectionSet
    if name in ("search_merge", "SearchResult", "compose"):
        from hyper_es import api

        return getattr(api, name)
    if name in ("merge", "Genome"):
        from hyper_es import merging

        return getattr(merging, name)
    raise AttributeError(f"module 'hyper_es' has no attribute '{name}'")
