"""The fitness rows: the searched tasks, their fitness pool and validation rows, and each generation's minibatch."""

from __future__ import annotations

import random

from hyper_es.recipe import Recipe
from hyper_es.tasks import Task


def fitness_splits(recipe: Recipe) -> tuple[list[Task], dict[str, list[dict]], dict[str, list[dict]]]:
    """The searched tasks (fitness.tasks, else those with a val split), their fitness pool (train rows; tasks without
    a train split are searched on validation rows) and their first val_size validation rows."""
    s = recipe.fitness
    names = recipe.searched_task_names()
    tasks = [Task(recipe.task(n), recipe.base_dir) for n in names]
    train = {t.name: t.rows("train") for t in tasks if t.cfg.train is not None}
    val = {t.name: t.rows("val")[: s.val_size] for t in tasks}
    return tasks, train or val, val


def fitness_rows(pool: dict[str, list[dict]], s, generation: int) -> dict[str, list[dict]]:
    """The generation's minibatch per task: one fixed draw (`fitness_set: fixed`) or one per generation."""
    draw = 0 if s.fitness_set == "fixed" else generation
    return {n: draw_rows(r, s.minibatch, s.seed * 100_003 + draw) for n, r in pool.items()}


def draw_rows(rows: list[dict], n: int, seed: int) -> list[dict]:
    return random.Random(seed).sample(rows, min(n, len(rows)))
