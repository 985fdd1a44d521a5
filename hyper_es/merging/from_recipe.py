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
