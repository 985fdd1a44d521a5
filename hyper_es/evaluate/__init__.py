"""Evaluation: the task runner, Pass@k and the final evaluation of a run (engines live in `hyper_es.engine`)."""

from hyper_es.engine import Generator, Sampling
from hyper_es.evaluate.passk import mean_pass_at_k, pass_at_k
from hyper_es.evaluate.runner import TaskResult, evaluate_task

__all__ = ["Generator", "Sampling", "TaskResult", "evaluate_task", "pass_at_k", "mean_pass_at_k"]
