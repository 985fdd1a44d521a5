"""Merge: DARE-TIES (and TIES, task arithmetic, DARE-linear) with layer-wise coefficients from a Genome.

(The package is `merging` so that `hyper_es.merge` stays the function of the API contract.)
"""

from hyper_es.merging.core import METHODS, MergePlan, MergeSettings, dare_mask, genome_for, global_weights, merge
from hyper_es.merging.genome import Genome

__all__ = ["METHODS", "Genome", "MergePlan", "MergeSettings", "dare_mask", "genome_for", "global_weights", "merge"]
