"""The GPU memory plan (`hyper-es check RECIPE --plan`): each stage's peak, worked out before anything starts, and
the engine settings that follow from it (vLLM's share of the card, TRL's vLLM share)."""

from __future__ import annotations

from hyper_es.memory.host import cpu_plan
from hyper_es.memory.plan import Plan, Stage, memory_plan, parse_size
from hyper_es.memory.shapes import GIB, ModelShape, model_config

__all__ = ["GIB", "ModelShape", "Plan", "Stage", "cpu_plan", "memory_plan", "model_config", "parse_size", "planned_share",
           "recipe_plan"]


def recipe_plan(recipe, device_bytes: int, *, resolve: bool = True, prompt_tokens: int = 512) -> Plan:
    """The plan of `recipe` on one GPU of `device_bytes`, from the model's shipped or own config."""
    config, where = model_config(recipe.model.name, revision=recipe.model.revision, resolve=resolve)
    return memory_plan(recipe, config, device_bytes, prompt_tokens=prompt_tokens, where=where)


def planned_share(recipe, stage: str, device_bytes: int, part: float = 1.0) -> float | None:
    """The plan's vLLM share of a card of `device_bytes` for `stage`: gpu_memory_utilization of a resident engine
    ("search engine", ...; rounded down) or TRL's vLLM in the "gradient job" (rounded up); None for a stage the plan
    does not cover (vLLM's default then). `part`: the part of the card the process holds (a Ray task or actor with
    a fractional GPU sees the whole card): planned for that part, returned as a share of the whole card."""
    import math

    plan = recipe_plan(recipe, int(part * device_bytes))
    found = next((s for s in plan.stages if s.name == stage), None)
    key = "gradient.vllm_gpu_memory_utilization" if stage == "gradient job" else "serve.gpu_memory_utilization"
    share = None if found is None else found.settings.get(key)
    if share is None or part == 1.0:
        return share
    if stage == "gradient job":  # TRL's vLLM needs at least its plan
        return math.ceil(100 * share * part - 1e-9) / 100
    return math.floor(100 * share * part + 1e-9) / 100  # an engine leaves the rest of the card
