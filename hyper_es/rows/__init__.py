"""Rows of a run: the models a report compares (base, directions, the baseline and its snapshots, Hyper-ES, ES, …),
each kind with its update, its charge (rows/charge.py) and whether it gets Pass@k (rows/kinds.py)."""

from hyper_es.rows.charge import jobs_cost
from hyper_es.rows.kinds import KINDS, PROMPTED, RowKind, es_grpo_delta, kind_of, prompt_file, row_update, start_genome

__all__ = ["KINDS", "PROMPTED", "RowKind", "es_grpo_delta", "jobs_cost", "kind_of", "prompt_file", "row_update",
           "start_genome"]
