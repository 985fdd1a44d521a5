"""Search: CMA-ES (pycma) over the genome; the LLM fitness scores genomes with an in-place engine (hyper_es.engine)."""

from hyper_es.search.driver import Budget, CMASearch, SearchState

__all__ = ["Budget", "CMASearch", "SearchState"]
