"""The one way from a recipe to the search's genome and merge settings (search, final evaluation, export)."""

from __future__ import annotations

from hyper_es.merging.core import MergeSettings, genome_for
from hyper_es.merging.genome import Genome


def recipe_genome(recipe, ds) -> tuple[Genome, MergeSettings]:
    """(genome, settings) of the recipe's `merge` and `search` sections over the DirectionSet `ds`."""
    m = recipe.merge
    genome = genome_for(ds, layer_group_size=m.layer_group_size, module_groups=m.module_groups,
                        per_direction_density=m.per_direction_density,
                        per_layer_density=m.per_layer_density, bounds=recipe.search.bounds)
    return genome, MergeSettings.from_config(m)


# mergekit 0.1.5's defaults per method (merge_methods/registry.py): density 1, and only TIES normalises by the
# agreeing weights; a user writes each model's `weight: 1` and tunes `lambda`.
MERGEKIT_NORMALIZE = {"task_arithmetic": False, "ties": True, "dare_ties": False, "dare_linear": False}


def unit_merge(ds, method: str, seed: int = 0) -> dict:
    """{tensor: ΔW} of every direction of `ds` merged by `method` at mergekit's defaults, weight 1 each and lambda 1:
    the composition controls, which scale it by one lambda chosen on validation."""
    from hyper_es.merging.core import MergePlan, global_weights

    genome, x = global_weights(ds, dict.fromkeys(ds.names, 1.0))
    settings = MergeSettings(method, 1.0, "l1", "sum", MERGEKIT_NORMALIZE[method], 1.0, seed)
    return {t: d.float() for t, d in MergePlan(ds, genome, settings, prepare=False).deltas(x)}
