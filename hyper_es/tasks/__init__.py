"""A task = data splits + prompt format + reward. `Task` turns a TaskConfig into prompts and scores."""

from __future__ import annotations

import random
from functools import cached_property
from pathlib import Path
from typing import Any

from hyper_es import rewards
from hyper_es.errors import DataError
from hyper_es.recipe import Recipe, TaskConfig
from hyper_es.tasks import prompts
from hyper_es.tasks.builtin import builtin_tasks
from hyper_es.tasks.sources import builtin_names, data_dir, load_rows

__all__ = ["Task", "get_task", "builtin_tasks", "builtin_names", "data_dir", "load_rows"]
SPLITS = ("train", "val", "test")


class Task:
    def __init__(self, cfg: TaskConfig, base_dir: Path | None = None):
        self.cfg = cfg
        self.name = cfg.name
        self.base_dir = base_dir or Path.cwd()
        self.reward = rewards.get(cfg.reward)
        self._rows: dict[str, list[dict]] = {}

    def rows(self, split: str) -> list[dict]:
        """Rows of a split (cached). Train rows whose question appears in val/test are dropped."""
        if split not in SPLITS:
            raise ValueError(f"unknown split '{split}'; expected one of: {', '.join(SPLITS)}")
        if split not in self._rows:
            src = getattr(self.cfg, split)
            if src is None:
                raise DataError(f"task '{self.name}' has no {split} split")
            rows = load_rows(src, self.base_dir)
            if split == "train":
                held = {r.get("question") for s in ("val", "test") if getattr(self.cfg, s) for r in self.rows(s)}
                rows = [r for r in rows if r.get("question") not in held]
            self._check(rows, split)
            self._rows[split] = rows
        return self._rows[split]

    def _check(self, rows: list[dict], split: str) -> None:
        if not rows:
            raise DataError(f"task '{self.name}': the {split} split is empty")
        need = [self.cfg.reference] if isinstance(self.cfg.reference, str) else self.cfg.reference
        for f in need:
            if f not in rows[0]:
                raise DataError(
                    f"task '{self.name}' {split}: rows have no field '{f}' needed by `reference` "
                    f"(columns: {', '.join(rows[0])})"
                )

    @cached_property
    def _shot_pool(self) -> list[dict]:
        return self.rows("train") if self.cfg.prompt.few_shot else []

    def shots(self, row: dict) -> list[dict]:
        """Few-shot examples for `row`: a fixed draw from train, seeded by the row id, never the row itself."""
        k = self.cfg.prompt.few_shot
        if not k:
            return []
        pool = [r for r in self._shot_pool if r.get("question") != row.get("question")]
        return random.Random(f"{self.name}:{row['id']}").sample(pool, min(k, len(pool)))

    def messages(self, row: dict) -> list[dict[str, str]]:
        return prompts.messages(self.cfg.prompt, row, self.shots(row), f"task '{self.name}'")

    def prompt_text(self, tokenizer, row: dict) -> str:
        return prompts.render(tokenizer, self.messages(row), self.cfg.prompt.chat)

    def prompt_ids(self, tokenizer, rows: list[dict]) -> list[list[int]]:
        """Token ids for each row; the chat template already carries any special tokens the model needs."""
        texts = [self.prompt_text(tokenizer, r) for r in rows]
        return tokenizer(texts, add_special_tokens=not self.cfg.prompt.chat)["input_ids"]

    def reference(self, row: dict) -> Any:
        ref = self.cfg.reference
        return row[ref] if isinstance(ref, str) else {f: row[f] for f in ref}

    def score(self, completion: str, row: dict) -> float:
        return float(self.reward(completion, self.reference(row)))


def get_task(name: str, recipe: Recipe | None = None) -> Task:
    """A task from the recipe (by name) or a built-in one."""
    if recipe is not None:
        return Task(recipe.task(name), recipe.base_dir)
    tasks = builtin_tasks()
    if name not in tasks:
        raise DataError(f"unknown task '{name}'; built-in tasks: {', '.join(tasks)} (or pass --recipe)")
    return Task(tasks[name])
