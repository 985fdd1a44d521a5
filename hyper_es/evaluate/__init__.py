"""Evaluation: the task runner, Pass@k and the final evaluation of a run (engines live in `hyper_es.engine`)."""

from hyper_es.engine import Generator, Sampling
from hyper_es.evaluate.passk import mean_pass_at_k, pass_at_k
from hyper_es.evaluate.runner import EvalJob, TaskResult, evaluate_task, evaluate_tasks

__all__ = ["EvalJob", "Generator", "Sampling", "TaskResult", "evaluate_task", "evaluate_tasks", "pass_at_k",
           "mean_pass_at_k"]
