"""The merge registry: method -> (sparsification, sign consensus); defined beside the recipe schema."""

from hyper_es.recipe import METHODS

__all__ = ["METHODS"]
