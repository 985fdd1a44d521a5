"""Issue 45: a task with an environment in the recipe, scored on episodes by the Scorer (the fitness of the search,
ES and co-evolution), alone and with a single-turn task, one candidate at a time and all candidates per turn."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hyper_es as hx

from hyper_es.environments import rows as episode_rows
from hyper_es.fitness import Scorer
from hyper_es.recipe import TaskConfig
from hyper_es.tasks import Task

GUESS = {"name": "guess", "environment": {"factory": "guess", "max_turns": 3, "max_tokens": 900, "turn_tokens": 300},
         "val": {"source": "environment", "name": "guess", "size": 6, "seed": 3, "horizon": 2}}


def test_an_environment_task_in_a_recipe():
    task = Task(TaskConfig(**GUESS))
    got = task.rows("val")
    assert got == episode_rows("guess", 6, 3, 2) and task.reward is None
    assert (task.limits().max_turns, task.limits().max_tokens, task.limits().turn_tokens) == (3, 900, 300)
    assert task.cfg.generated_cap == 900  # what `hyper-es check` bounds an episode by (all its turns)
    for bad, why in (({**GUESS, "reward": "math"}, "a `reward`, or an `environment`"),
                     ({"name": "t", "reward": "math", "val": GUESS["val"]}, "source 'environment' makes episodes"),
                     ({**GUESS, "environment": {"factory": "guess_typo"}}, "expected 'package.module:name'"),
                     ({**GUESS, "val": {**GUESS["val"], "name": "chess"}}, "'calculator' or 'guess'")):
        with pytest.raises(ValueError, match=why):
            TaskConfig(**bad)


class GuessByGenome:
    """An engine at the unit level: a candidate x guesses x[0] on its first turn, then answers in words."""

    candidates, last_fidelity, max_model_len, backend = "inplace", 0.0, None, "unit"

    def __init__(self, tok):
        self.tok, self.x, self.calls = tok, None, []

    def set_genome(self, x):
        self.x = x

    def _text(self, prompt: str) -> str:
        if prompt.count("<tool_response>"):
            return "Found it."
        number = 3 if "Always guess 3." in prompt else 5 if "Always guess 5." in prompt else int(self.x[0])
        return "<tool_call>\n" + json.dumps({"name": "guess", "arguments": {"number": number}}) + "\n</tool_call>"

    def generate_groups(self, groups, seeds=None):
        self.calls.append(("one", sum(len(p) for p, _ in groups)))
        return [[[self.tok.encode(self._text(self.tok.decode(p)), add_special_tokens=False)[: s.max_tokens]]
                 for p in prompts] for prompts, s in groups]

    def generate_candidates(self, xs, groups, seeds=None):
        self.calls.append(("all", len(xs)))
        outs = []
        for x, gs in zip(xs, groups, strict=True):
            self.x = x
            outs.append([[[self.tok.encode(self._text(self.tok.decode(p)), add_special_tokens=False)[: s.max_tokens]]
                          for p in prompts] for prompts, s in gs])
        self.last_fidelities = [0.0] * len(xs)
        return outs


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from hyper_es import models

    return AutoTokenizer.from_pretrained(models.resolve("tiny-random"))


def test_a_candidate_is_scored_on_its_episodes(tok):
    """Each row's reward is its episode's; the tokens are every turn's; the counts of the episodes are kept; with a
    single-turn task beside it, per_row follows the Scorer's task order."""
    task = Task(TaskConfig(**GUESS))
    val = {task.name: task.rows("val")}
    secrets = [r["secret"] for r in val[task.name]]
    engine = GuessByGenome(tok)
    scorer = Scorer(engine, tok, [task])
    for guess in (1, 2, 3, 4):
        score = scorer.score([guess], val)
        assert score.per_row == [float(s == guess) for s in secrets]
        assert score.reward == pytest.approx(sum(s == guess for s in secrets) / len(secrets))
        assert score.episodes[task.name] == {"episodes": 6, "turns": 12, "tool_calls": 6, "tokens": score.tokens,
                                             "ends": {"answered": 6}}  # a call, then an answer

    chain = Task(TaskConfig(name="chain", val={"source": "builtin", "name": "chain_sum_test", "limit": 2},
                            reward="math", max_tokens=4))
    both = Scorer(GuessByGenome(tok), tok, [chain, task])
    mixed = both.score([2], {chain.name: chain.rows("val"), **val})
    assert mixed.per_row[2:] == [float(s == 2) for s in secrets] and len(mixed.per_row) == 2 + len(secrets)


def test_all_candidates_share_each_turn_and_score_as_one_by_one(tok):
    """An engine with LoRA candidates: each turn of every candidate's episodes is one generate_candidates call
    (the candidates whose episodes ended sit out), and the Scores are those of one candidate at a time."""
    task = Task(TaskConfig(**GUESS))
    val = {task.name: task.rows("val")}
    xs = [[1], [2], [3], [4]]
    alone = [Scorer(GuessByGenome(tok), tok, [task]).score(x, val) for x in xs]
    engine = GuessByGenome(tok)
    engine.candidates = "lora"
    together = Scorer(engine, tok, [task]).score_many(xs, val)
    assert [(s.reward, s.per_row, s.tokens, s.episodes) for s in together] == [
        (s.reward, s.per_row, s.tokens, s.episodes) for s in alone]
    assert engine.calls == [("all", 4), ("all", 4)]  # two turns, each one call for the four candidates


def test_a_co_evolved_system_turn_opens_each_candidates_episodes(tok):
    """Co-evolution on an environment task: a candidate's prompt (a system turn, or tool descriptions) opens its
    episodes, one by one and when all candidates share each turn; only those two genes evolve on an environment
    task, and tool descriptions only there and only for the class's tools."""
    from hyper_es.recipe import PromptSpace, recipe_from_dict
    from hyper_es.tasks.prompt_genome import Prompt, PromptGenome
    from recipes import tiny_data  # noqa: E402  (tests/helpers is on sys.path: conftest)

    task = Task(TaskConfig(**GUESS))
    val = {task.name: task.rows("val")}
    secrets = [r["secret"] for r in val[task.name]]
    genome = PromptGenome(task, PromptSpace(systems=["Always guess 3."], max_shots=0,
                                            tools=[{"guess": "Guess the hidden number. Always guess 5."}]))
    told, tooled = genome.task(Prompt(system=1)), genome.task(Prompt(tools=1))
    assert genome.mutable() == ["system", "tools"] and len(genome.neighbours()) == 3
    scorer = Scorer(GuessByGenome(tok), tok, [task])
    assert scorer.score([1], val, tasks=[told]).per_row == [float(s == 3) for s in secrets]
    assert scorer.score([1], val).per_row == [float(s == 1) for s in secrets]
    engine = GuessByGenome(tok)
    engine.candidates = "lora"
    both = Scorer(engine, tok, [task]).score_many([[1], [1], [1]], val, tasks=[[told], [task], [tooled]])
    assert [b.per_row for b in both] == [[float(s == v) for s in secrets] for v in (3, 1, 5)]
    assert genome.describe(Prompt(tools=1))["tools"] == {"guess": "Guess the hidden number. Always guess 5."}
    data = tiny_data({"tasks": [{**GUESS, "test": GUESS["val"]}],
                      "coevolve": {"tasks": {"guess": {"templates": ["{question}!"], "max_shots": 0}}}})
    with pytest.raises(ValueError, match="only `systems` and `tools` evolve there"):
        recipe_from_dict(data)
    data["coevolve"]["tasks"]["guess"] = {"tools": [{"guess": "Guess.", "submit": "Submit."}], "max_shots": 0}
    with pytest.raises(ValueError, match=r"tools\[0\]: submit is not a tool of guess; expected some of: guess"):
        recipe_from_dict(data)
    single = tiny_data({"coevolve": {"tasks": {"chain_sum": {"tools": [{"add": "Add."}]}}}})
    with pytest.raises(ValueError, match="calls no tools"):
        recipe_from_dict(single)
    for extra, why in (({"fitness": {"reward": "numeric"}}, "play an environment, whose episodes carry"),
                       ({"gradient": {"rewards": {"numeric": 1.0}}}, "rewarded by its episodes")):
        with pytest.raises(ValueError, match=why):
            recipe_from_dict(tiny_data({"tasks": [{**GUESS, "train": GUESS["val"], "test": GUESS["val"]}], **extra}))


def test_a_baseline_on_an_environment_beside_single_turn_tasks_is_refused_by_the_recipe(tmp_path):
    """TRL's trainer takes one environment and no single-turn rows beside it, and the GRPO-LoRA baseline trains on
    every training task: `hyper-es check` refuses such a recipe, unless the directions are given and no baseline
    is trained; `hyper-es compare` (whose lr grid trains the baseline) refuses it then too."""
    from hyper_es.compare.run import compare
    from hyper_es.errors import RecipeError
    from hyper_es.recipe import recipe_from_dict
    from recipes import tiny_data  # noqa: E402

    data = tiny_data({"gradient.rewards": None})
    data["tasks"].append({**GUESS, "train": GUESS["val"], "test": GUESS["val"]})
    with pytest.raises(ValueError, match="gradient.tasks: a GRPO job trains on one environment section or on "
                                         "single-turn tasks, not both: the training tasks are .*guess; expected"):
        recipe_from_dict(data)
    longer = {**data["tasks"][-1], "name": "guess_long", "environment": {**GUESS["environment"], "max_turns": 4}}
    with pytest.raises(ValueError, match="one environment section"):  # one job, one set of episode limits
        recipe_from_dict({**data, "tasks": [*data["tasks"], longer], "gradient": {**data["gradient"],
                                                                                  "tasks": ["guess", "guess_long"]}})
    assert recipe_from_dict({**data, "gradient": {**data["gradient"], "tasks": ["guess"]}}).mixed_training() is None
    given = recipe_from_dict({**data, "directions": {"adapters": ["a", "b"]}})  # no GRPO job in `hyper-es run`
    with pytest.raises(RecipeError, match="gradient.tasks: a GRPO job trains on one environment"):
        compare(given, [0], tmp_path / "cmp")
    assert not (tmp_path / "cmp").exists()
    with pytest.raises(ValueError, match="a GRPO job trains on one environment"):
        recipe_from_dict({**data, "directions": {"adapters": ["a", "b"], "baseline": True}})


def test_the_evaluation_plays_an_environment_task(tok):
    """`evaluate_tasks` plays an environment task beside a single-turn one: Pass@1 is the share of episodes solved,
    and each record keeps its episode (counts and the messages after the prompt)."""
    from hyper_es.evaluate.runner import EvalJob, evaluate_tasks

    task = Task(TaskConfig(**GUESS))
    chain = Task(TaskConfig(name="chain", test={"source": "builtin", "name": "chain_sum_test", "limit": 2},
                            reward="math", max_tokens=4))
    engine = GuessByGenome(tok)
    engine.set_genome([2])
    single, played = evaluate_tasks(engine, tok, [EvalJob(chain), EvalJob(task, split="val")])
    secrets = [r["secret"] for r in task.rows("val")]
    assert single.task == "chain" and single.problems == 2
    assert played.pass_at[1] == pytest.approx(sum(s == 2 for s in secrets) / len(secrets))
    assert [r["scores"] for r in played.records] == [[float(s == 2)] for s in secrets]
    first = played.records[0]["episodes"][0]
    assert first["turns"] == 2 and first["tool_calls"] == 1 and [m["role"] for m in first["messages"]] == [
        "assistant", "tool", "assistant"]


def test_a_search_over_episodes_resumes_to_the_same_history(tmp_path):
    """CMA-ES over given adapters with the guess environment as its fitness (HF, the tiny model): a search killed
    after its first generation resumes to the history of one never killed."""
    import hyper_es as hx
    from test_own_adapters import make_adapters  # noqa: E402  (tests/ is on sys.path under pytest)

    folders = make_adapters(tmp_path / "adapters")
    ds = hx.DirectionSet.from_adapters("tiny-random", folders, names=["a0", "a1", "a2"])
    task = {**GUESS, "environment": {**GUESS["environment"], "turn_tokens": 16, "max_tokens": 48},
            "test": {**GUESS["val"], "seed": 4, "size": 4}}
    kw = dict(tasks=[task], merge={"method": "task_arithmetic"}, search={"popsize": 4, "max_generations": 2},
              fitness={"minibatch": 4, "val_size": 6})
    whole = hx.search_merge(ds, out=tmp_path / "whole", **kw)
    from hyper_es.search.driver import CMASearch

    tell, calls = CMASearch.tell, []

    def dying(self, *a, **k):
        record = tell(self, *a, **k)
        calls.append(self.state.generation)
        if self.state.generation == 1 and len(calls) == 1:
            raise KeyboardInterrupt
        return record

    CMASearch.tell = dying
    try:
        with pytest.raises(KeyboardInterrupt):
            hx.search_merge(ds, out=tmp_path / "killed", **kw)
        resumed = hx.search_merge(ds, out=tmp_path / "killed", **kw)
    finally:
        CMASearch.tell = tell
    log = [(tmp_path / run / "search" / "generations.jsonl").read_text().splitlines() for run in ("whole", "killed")]
    strip = [[{k: v for k, v in json.loads(line).items() if not k.endswith("_s") and k not in ("timing", "seconds")} for line in run]
             for run in log]
    assert strip[0] == strip[1] and len(strip[0]) == 2
    assert np.array_equal(whole.x, resumed.x) and all(r["tokens"] > 0 for r in strip[0])


def test_a_gradient_job_trains_on_the_environment(tmp_path):
    """The gradient stage on an environment task: TRL's GRPOTrainer with the task's class as its environment_factory
    (one step, the tiny model), the environment's reward logged; its adapter is a direction like any other."""
    from hyper_es.directions.collect import collect
    from recipes import tiny_recipe  # noqa: E402  (tests/helpers is on sys.path: conftest)

    task = {**GUESS, "environment": {**GUESS["environment"], "max_turns": 2, "max_tokens": 16, "turn_tokens": 8},
            "train": {**GUESS["val"], "seed": 5, "size": 8}}
    recipe = tiny_recipe(tmp_path, {"tasks": [task], "gradient.directions": 1, "gradient.steps": 1},
                         base="dense", write=True)
    collect(recipe, tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "directions" / "dir-0" / "manifest.json").read_text())
    assert (tmp_path / "run" / "directions" / "dir-0" / "adapter_model.safetensors").is_file()
    assert manifest["optimizer_steps"] == 1 and manifest["tokens"] > 0 and len(manifest["reward_curve"]) == 1
    assert manifest["train_rows"] == 8 and manifest["tool_calls_per_completion"] is not None  # TRL ran the tools
    # each turn capped at turn_tokens as in our episodes (the tiny model calls no tool: one turn, not 16 tokens)
    assert manifest["longest_completion"] <= 8


def test_es_over_episodes_resumes_by_replay(tmp_path):
    """Full-parameter ES with the guess environment as its fitness (HF, the tiny model): each iteration's record
    counts its episodes' tokens; a run cut after two iterations replays them and ends with the same history."""
    from hyper_es.es.history import HISTORY
    from hyper_es.search.es_run import es_search
    from recipes import tiny_recipe  # noqa: E402  (tests/helpers is on sys.path: conftest)
    from test_es_run import _engine  # noqa: E402  (tests/ is on sys.path under pytest)

    task = {**GUESS, "environment": {**GUESS["environment"], "max_tokens": 32, "turn_tokens": 16},
            "test": {**GUESS["val"], "seed": 4, "size": 4}}
    recipe = tiny_recipe(tmp_path, {"tasks": [task], "method": "es", "model.max_model_len": 2048,
                                    "es": {"population": 4, "iterations": 3, "sigma": 0.02, "alpha": 0.01},
                                    "fitness": {"minibatch": 4, "val_size": 4, "fitness_set": "fixed"}})
    es_search(recipe, tmp_path / "a", *_engine(recipe))
    hist = (tmp_path / "a" / "es" / HISTORY).read_text().splitlines()
    assert len(hist) == 3 and all(json.loads(h)["tokens"] > 0 for h in hist)
    (tmp_path / "b" / "es").mkdir(parents=True)
    (tmp_path / "b" / "es" / HISTORY).write_text("\n".join(hist[:2]) + "\n")
    (tmp_path / "b" / "es" / "start.json").write_text((tmp_path / "a" / "es" / "start.json").read_text())
    es_search(recipe, tmp_path / "b", *_engine(recipe))
    assert (tmp_path / "b" / "es" / HISTORY).read_text().splitlines() == hist


def test_a_whole_run_on_an_environment_reports_its_episodes(tmp_path):
    """`hyper-es run` on the guess environment over given adapters (HF, the tiny model): searched on episodes, every
    row evaluated on held-out episodes and reported with its tokens."""
    import yaml

    from hyper_es.pipeline import run
    from test_own_adapters import make_adapters  # noqa: E402  (tests/ is on sys.path under pytest)

    make_adapters(tmp_path / "adapters")
    task = {**GUESS, "environment": {**GUESS["environment"], "max_turns": 2, "max_tokens": 16, "turn_tokens": 8},
            "test": {**GUESS["val"], "seed": 6, "size": 4}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({
        "name": "episodes", "model": {"name": "tiny-random", "max_model_len": 2048}, "tasks": [task],
        "directions": {"adapters": ["adapters/a0", "adapters/a1"]}, "merge": {"method": "task_arithmetic"},
        "search": {"popsize": 2, "max_generations": 1}, "fitness": {"minibatch": 4, "val_size": 4},
        "eval": {"backend": "hf", "k": [1]}}, sort_keys=False))
    report = run(hx.load_recipe(tmp_path / "recipe.yaml"), tmp_path / "run", backend="hf")
    rows = {r["name"]: r for r in report["rows"]}
    assert {"base", "a0", "a1", "hyper-es"} <= set(rows) and rows["hyper-es"]["tokens"] > 0
    record = json.loads((tmp_path / "run" / "eval" / "hyper-es.json").read_text())
    assert "guess" in json.dumps(record) and (tmp_path / "run" / "report.md").is_file()
