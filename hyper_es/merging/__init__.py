"""Merge: DARE-TIES (and TIES, task arithmetic, DARE-linear) with layer-wise coefficients from a Genome.

(The package is `merging` so that `hyper_es.merge` stays the function of the API contract.) Torch-backed names
load on first use, so the recipe schema can read the method registry (`merging.methods`) without torch.
"""

from hyper_es.merging.methods import METHODS

__all__ = ["METHODS", "Genome", "MergePlan", "MergeSettings", "dare_mask", "genome_for", "global_weights", "merge",
           "recipe_genome", "unit_merge"]
_CORE = ("MergePlan", "MergeSettings", "dare_mask", "genome_for", "global_weights", "merge")


def __getattr__(name: str):
    if name in _CORE:
        from hyper_es.merging import core

        return getattr(core, name)
    if name == "Genome":
        from hyper_es.merging.genome import Genome

        return Genome
    if name in ("recipe_genome", "unit_merge"):
        from hyper_es.merging import from_recipe

        return getattr(from_recipe, name)
    raise AttributeError(f"module 'hyper_es.merging' has no attribute '{name}'")
