"""Every shipped recipe loads and is consistent. The GPU recipes cannot run here: everything about them that can
be checked without a GPU (schema, prompts, rewards on their references, budgets, layer grouping) is checked."""

import math
from pathlib import Path

import pytest

import hyper_es as hx
from hyper_es.directions.jobs import plan_baseline, plan_directions
from hyper_es.tasks import Task

RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))
GPU = {  # recipe → (layers of the backbone, from its config.json on the hub)
    "qwen2.5-0.5b-instruct": 24, "qwen2.5-1.5b-instruct": 28, "qwen2.5-7b-instruct": 28,
    "deepseek-r1-distill-qwen-1.5b": 28, "deepseek-r1-distill-qwen-7b": 28,
}


def test_the_expected_recipes_ship():
    assert {p.stem for p in RECIPES} == {*GPU, "smollm2-135m", "smollm2-135m-es", "smollm2-135m-compose",
                                        "smollm2-135m-compose-fewshot", "smollm2-135m-guess", "tiny"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_loads_and_budgets_hold(path):
    recipe = hx.load_recipe(path)
    assert recipe.name == path.stem
    if recipe.directions is None:  # trained directions: Hyper-ES uses 90% of the baseline's steps
        total = sum(j.steps for j in plan_directions(recipe))
        assert plan_baseline(recipe).steps == math.ceil(total / 0.9)
    else:  # given adapters (composition): the baseline is the multi-task GRPO-LoRA control, its steps as written
        assert recipe.directions.baseline and plan_baseline(recipe).steps == recipe.gradient.baseline_steps
    assert any(t.test is not None for t in recipe.tasks)
    row = {"id": "x", "question": "What is 2+3?", "answer": "5"}
    for cfg in recipe.tasks:
        task = Task(cfg, recipe.base_dir)
        if task.environment is not None:  # episodes: the environment's rows and reward (test_episode_fitness.py)
            assert task.rows("val") and task.environment.get_reward
            continue
        text = task.messages(row)[-1]["content"]
        assert "What is 2+3?" in text and "\\boxed{}" in text
        assert task.reward("so \\boxed{5}", "5") == 1.0 and task.reward("\\boxed{6}", "5") == 0.0


@pytest.mark.parametrize("name", sorted(GPU))
def test_gpu_recipe_settings(name):
    path = next(p for p in RECIPES if p.stem == name)
    recipe = hx.load_recipe(path)
    header = path.read_text().split("\nname:")[0]
    assert "GPU memory" in header and "GiB" in header  # each states its memory plan (tests/test_memory_plan.py)
    assert recipe.model.dtype == "bfloat16" and recipe.eval.backend == "vllm" and recipe.gradient.use_vllm
    assert GPU[name] % recipe.merge.layer_group_size == 0  # equal layer groups
    assert recipe.eval.k == [1, 8] and recipe.eval.temperature > 0
    if recipe.fitness.samples > 1:
        assert recipe.fitness.temperature > 0
    assert {t.name for t in recipe.tasks} & {"gsm8k", "math"}


def test_the_es_recipe_passes_hyper_es_check(cli):
    """`hyper-es check` on the full-parameter ES recipe: schema, the real SmolLM2 model, the tasks' data."""
    path = Path(__file__).resolve().parents[1] / "recipes" / "smollm2-135m-es.yaml"
    res = cli("check", path, "--print")
    assert res.exit_code == 0, res.stderr[-2000:]
    assert res.stdout.startswith("recipe smollm2-135m-es: model") and "method es: full-parameter ES" in res.stdout
    assert "method: es" in res.stdout and "population: 16" in res.stdout
    assert hx.load_recipe(path).method == "es"
