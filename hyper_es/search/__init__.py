"""Search: CMA-ES (pycma) over the genome. The LLM fitness (in-place re-merge in a resident engine) builds on it."""

from hyper_es.search.driver import Budget, CMASearch, SearchState

__all__ = ["Budget", "CMASearch", "SearchState"]
