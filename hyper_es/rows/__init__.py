"""Rows of a run: the models a report compares (base, directions, baseline and its snapshots, Hyper-ES, ES, …) and
the weight update ΔW each one stands for."""

from hyper_es.rows.update import es_grpo_delta, row_update

__all__ = ["es_grpo_delta", "row_update"]
