"""Built-in tasks: shipped held-out test sets, with seeded reasoning-gym training data of the same distribution."""

from __future__ import annotations

import json
from functools import cache

from hyper_es.recipe import TaskConfig
from hyper_es.tasks.sources import data_dir

BOXED = "\nGive the final answer in \\boxed{{}}."  # braces doubled: templates use str.format
COUNTDOWN = (
    "Using the numbers {numbers}, write an expression that equals {target}. Use +, -, * and /, and use every "
    "number exactly once. Think step by step, then put only the expression inside <answer> </answer> tags, "
    "for example <answer>(3 + 5) * 2</answer>."
)
# Training seeds start far below the test seeds in data/manifest.json (reasoning-gym item i uses seed + i).
TRAIN_SEED = 1
TRAIN_SIZE = 2000


@cache
def _manifest() -> dict:
    return json.loads((data_dir() / "manifest.json").read_text(encoding="utf-8"))


def _generated(name: str, reward: str, template: str, max_tokens: int, reference="answer") -> dict:
    cfg = _manifest()[f"{name}_test.jsonl"]
    return {
        "name": name,
        "train": {"source": "reasoning_gym", "dataset": cfg["generator"], "size": TRAIN_SIZE, "seed": TRAIN_SEED,
                  "config": cfg["config"]},
        "test": {"source": "builtin", "name": f"{name}_test"},
        "prompt": {"template": template},
        "reward": reward,
        "reference": reference,
        "max_tokens": max_tokens,
    }


def builtin_tasks() -> dict[str, TaskConfig]:
    specs = [
        {"name": "gsm8k", "test": {"source": "builtin", "name": "gsm8k_test100"},
         "prompt": {"template": "{question}" + BOXED}, "reward": "numeric", "max_tokens": 256},
        _generated("basic_arithmetic", "numeric", "{question}" + BOXED, 128),
        _generated("chain_sum", "numeric", "{question}" + BOXED, 128),
        _generated("gsm_symbolic", "numeric", "{question}" + BOXED, 256),
        _generated("countdown", "countdown", COUNTDOWN, 256, reference=["numbers", "target"]),
    ]
    return {s["name"]: TaskConfig.model_validate(s) for s in specs}
