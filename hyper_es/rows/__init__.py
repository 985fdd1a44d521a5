"""Rows of a run: the models a report compares (base, directions, the baseline and its snapshots, Hyper-ES, ES, …),
each kind with its update, its cost and whether it gets Pass@k (rows/kinds.py)."""

from hyper_es.rows.kinds import KINDS, RowKind, es_grpo_delta, jobs_cost, kind_of, row_update, start_genome

__all__ = ["KINDS", "RowKind", "es_grpo_delta", "jobs_cost", "kind_of", "row_update", "start_genome"]
