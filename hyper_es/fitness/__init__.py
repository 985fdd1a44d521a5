"""Fitness: rows, minibatches, rewards and validation scoring, below the search. A Scorer scores candidates with one
resident engine; an EnginePool (fitness/pool.py, `executor.kind: ray`) is a Scorer over engine actors."""

from hyper_es.fitness.rows import fitness_rows, fitness_splits
from hyper_es.fitness.scorer import Score, Scorer

__all__ = ["Score", "Scorer", "fitness_rows", "fitness_splits"]
