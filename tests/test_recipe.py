"""Every recipe error path gives one line naming the file, the field path and what was expected."""

from pathlib import Path

import pytest
import yaml

import hyper_es as hx
from hyper_es.recipe import Recipe

ROOT = Path(__file__).resolve().parents[1]
GOOD = {
    "name": "t",
    "model": {"name": "tiny-random"},
    "tasks": [{"name": "a", "reward": "numeric", "test": {"source": "builtin", "name": "chain_sum_test"},
               "train": {"source": "reasoning_gym", "dataset": "chain_sum", "size": 8}}],
}


def write(tmp_path: Path, data) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return p


def mutate(**paths):
    """Copy GOOD and set dotted paths (a value of ... deletes the key)."""
    import copy

    d = copy.deepcopy(GOOD)
    for dotted, value in paths.items():
        keys = [int(k) if k.isdigit() else k for k in dotted.split("__")]
        node = d
        for key in keys[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
        if value is ...:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return d


BAD = [
    (mutate(tasks__0__promt={}), "tasks[0].promt: unknown field 'promt'; expected one of: name, train, val, test"),
    (mutate(modell={"name": "x"}), "modell: unknown field 'modell'; expected one of: name, model, tasks"),
    (mutate(tasks__0__test={"source": "s3", "name": "x"}), "tasks[0].test: unknown source 's3'; expected one of"),
    (mutate(tasks__0__test={"name": "x"}), "tasks[0].test: missing 'source'; expected one of: reasoning_gym"),
    (mutate(tasks__0__train__size=-1), "tasks[0].train.size: expected greater than 0, got -1"),
    (mutate(tasks__0__train__sed=1), "tasks[0].train.sed: unknown field 'sed'; expected one of: source, dataset"),
    (mutate(tasks__0__reward="nope"), "tasks[0].reward: unknown reward 'nope'; expected one of: countdown"),
    (mutate(model=...), "model: required field is missing"),
    (mutate(model__dtype="fp8"), "model.dtype: expected 'float32', 'bfloat16' or 'float16', got 'fp8'"),
    (mutate(eval={"backend": "tpu"}), "eval.backend: expected 'vllm' or 'hf', got 'tpu'"),
    (mutate(merge={"density": 1.5}), "merge.density: expected less than or equal to 1, got 1.5"),
    (mutate(merge={"density": 0}), "merge.density: expected greater than 0, got 0"),
    (mutate(search={"bounds": [2, 1]}), "search.bounds: expected [low, high] with low < high, got [2.0, 1.0]"),
    (mutate(gradient={"batch_size": 6, "num_generations": 4}),
     "gradient: batch_size (6) must be divisible by num_generations (4)"),
    (mutate(gradient={"tasks": ["zz"]}), "gradient.tasks[0]: unknown task 'zz'; expected one of: a"),
    (mutate(fitness={"tasks": ["a"]}), "fitness.tasks[0]: task 'a' has no val split"),
    (mutate(search={"candidates": "lora", "minibatch": 4}), "search: candidates moved to serve.candidates, minibatch "
     "moved to fitness.minibatch (fitness: what the search and ES score a candidate on; serve: how an engine serves it)"),
    (mutate(fitness={"rescore_top": 0}), "fitness.rescore_top: 0 re-scores nothing on validation, and "
     "search.recommend: best_val returns the best re-scored candidate; expected rescore_top >= 1, or recommend: mean"),
    (mutate(search={"recommend": "mean"}, coevolve={"tasks": {"a": {}}}), "search.recommend: mean is CMA-ES's mean "
     "of the coefficients, but co-evolution picks a prompt with them by validation; expected best_val"),
    (mutate(search={"max_tokens": 0}), "search.max_tokens: expected greater than 0, got 0"),
    (mutate(gradient={"baseline_start": "wide"}), "gradient.baseline_start: 'wide' is not one of directions.adapters "
     "(none given); expected an adapter's name"),
    (mutate(compare={"further": True}), "compare.further: the best given adapter trained on with grpo-equal-compute's "
     "budget; expected directions.adapters and compare.equal"),
    (mutate(fitness={"race": {"rungs": [32, 16]}}), "fitness.race.rungs: Value error, expected increasing row "
     "counts, got [32, 16]"),
    (mutate(method="es", fitness={"race": {"rungs": [16]}}), "fitness.race: racing ranks CMA-ES's candidates for its "
     "parents; ES weights every member"),
    (mutate(eval={"k": [1, 8], "n": 4}), "eval: n (4) must be >= the largest k (8)"),
    (mutate(threads="x"), "threads: expected a valid integer"),
    (mutate(tasks=[]), "tasks: List should have at least 1 item"),
    (mutate(tasks__0__train=..., tasks__0__test=...), "tasks[0]: Value error, a task needs at least one of train"),
    (mutate(tasks__0__prompt={"few_shot": 2}, tasks__0__train=...), "tasks[0]: Value error, prompt.few_shot > 0"),
    (mutate(tasks__0__name="bad name!"), "tasks[0].name: String should match pattern"),
    (mutate(gradient={"loss_type": "ppo"}), "gradient.loss_type: expected 'grpo', 'bnpo', 'dr_grpo' or 'dapo'"),
    ("name: [unclosed\n", "r.yaml: invalid YAML at line 2"),
    ("- just\n- a list\n", "r.yaml: expected a mapping of recipe fields at the top level, got list"),
]


@pytest.mark.parametrize("data,expected", BAD, ids=[e[1].split(":")[0] for e in BAD])
def test_malformed_recipe_gives_one_clear_line(tmp_path, data, expected):
    path = write(tmp_path, data)
    with pytest.raises(hx.RecipeError) as info:
        hx.load_recipe(path)
    msg = str(info.value)
    lines = msg.splitlines()
    assert len(lines) == 1, msg
    assert lines[0].startswith(f"{path}: "), msg
    assert expected.replace("Value error, ", "") in lines[0], msg


def test_several_errors_give_one_line_each(tmp_path):
    path = write(tmp_path, mutate(merge={"density": 2}, eval={"backend": "x"}))
    with pytest.raises(hx.RecipeError) as info:
        hx.load_recipe(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and all(line.startswith(str(path)) for line in lines)


def test_missing_file_and_non_utf8(tmp_path):
    with pytest.raises(hx.RecipeError, match="no such recipe file"):
        hx.load_recipe(tmp_path / "absent.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(hx.RecipeError, match="not UTF-8"):
        hx.load_recipe(bad)


def test_cli_prints_error_without_traceback(cli, tmp_path):
    path = write(tmp_path, mutate(merge={"density": 1.5}))
    proc = cli("check", path)
    assert proc.exit_code == 2
    assert proc.stderr.strip() == f"error: {path}: merge.density: expected less than or equal to 1, got 1.5"


@pytest.mark.parametrize("path", sorted((ROOT / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_recipes_load_and_round_trip(path):
    recipe = hx.load_recipe(path)
    assert recipe.base_dir == path.parent.resolve()
    again = Recipe.model_validate(yaml.safe_load(recipe.to_yaml()))
    assert again.model_dump() == recipe.model_dump()


def test_a_run_folder_written_before_fitness_reads_with_the_fields_moved(tmp_path):
    """The committed re-decision's run folders name fitness and serve fields under search:. A command given such a
    recipe refuses it, naming the move; a run folder's recipe.yaml is data and reads with the fields moved."""
    run = ROOT / "bench/results/decide2/seed0/main"
    old = yaml.safe_load((run / "recipe.yaml").read_text())
    assert old["search"]["minibatch"] == 64 and "fitness" not in old
    recipe = hx.recipe.load_run_recipe(run)
    assert (recipe.fitness.minibatch, recipe.fitness.fitness_set, recipe.fitness.val_size) == (64, "fixed", 200)
    assert recipe.serve.candidates == old["search"]["candidates"] and recipe.search.popsize == old["search"]["popsize"]
    with pytest.raises(hx.errors.RecipeError, match=r"recipe\.yaml: search: .*minibatch moved to fitness\.minibatch"):
        hx.load_recipe(run / "recipe.yaml")


def test_check_bounds_the_search_by_its_token_budget():
    """`hyper-es check`'s tokens-at-most of the search: every completion at its cap, and no more than
    search.max_tokens plus the generation that reaches it, the guard and the rows."""
    from hyper_es.cli.summary import token_bounds

    base = hx.load_recipe(ROOT / "recipes" / "smollm2-135m.yaml")
    unbounded = token_bounds(base, 12, 4, {})["search"]
    capped = base.model_copy(update={"search": base.search.model_copy(update={"max_tokens": 10_000})})
    fit = 2 * 64 * 64  # a candidate: 64 rows of 2 tasks at 64 tokens
    val, gen = 2 * 200 * 64, 8 * fit  # the validation rows; a generation of 8 candidates
    assert token_bounds(capped, 12, 4, {})["search"] == 10_000 + gen + 2 * val + 6 * val < unbounded
