"""The prompt genome (co-evolution): the recipe's prompt is its start, few-shot examples are train rows only,
mutations are seeded and change one gene, and a prompt renders through the task's own code."""

import json
import random

import pytest

from hyper_es import DataError
from hyper_es.recipe import PromptSpace, TaskConfig
from hyper_es.tasks import Task
from hyper_es.tasks.prompt_genome import GENES, Prompt, PromptGenome

SPACE = PromptSpace(systems=[None, "You add numbers.", "Be brief."], templates=["Compute {question}."],
                    formats=["Answer with {the number} only."], max_shots=3)


def task(few_shot=0, partition="question", **prompt) -> Task:
    src = {"source": "reasoning_gym", "dataset": "chain_sum", "partition": partition,
           "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}
    return Task(TaskConfig.model_validate({
        "name": "t", "reward": "numeric", "prompt": {"few_shot": few_shot, "chat": False, **prompt},
        "train": {**src, "size": 40, "seed": 1}, "val": {**src, "size": 20, "seed": 2},
        "test": {**src, "size": 20, "seed": 3}}))


@pytest.mark.parametrize("few_shot", [0, 2])
def test_the_start_renders_the_tasks_own_prompt(few_shot):
    t = task(few_shot, system="Sys.")
    genome = PromptGenome(t, SPACE)
    start = genome.start()
    assert start == (Prompt(shots=()) if few_shot == 0 else Prompt(shots=None))
    view = genome.task(start)
    for row in t.rows("val")[:5] + t.rows("train")[:5]:
        assert view.prompt_text(None, row) == t.prompt_text(None, row)
    assert genome.systems[0] == "Sys." and genome.formats[0] == ""  # the task's own parts are gene 0


@pytest.mark.parametrize("partition", ["question", "none"])
def test_few_shot_examples_are_never_validation_or_test_rows(partition):
    t = task(2, partition=partition)
    genome = PromptGenome(t, SPACE)
    held = {r["question"] for s in ("val", "test") for r in t.rows(s)}
    rng, p, seen = random.Random(0), genome.start(), set()
    for _ in range(500):
        p = genome.check(genome.mutate(p, rng), "mutant")
        view = genome.task(p)
        for row in t.rows("test")[:3]:
            shots = view.shots(row)
            assert all(s["question"] not in held for s in shots)
            assert all(s["id"] in {r["id"] for r in t.rows("train")} for s in shots)
        seen.update(p.shots or ())
    assert len(seen) > 10  # the examples do move over the train rows


def test_a_fitness_row_is_never_its_own_example():
    t = task()
    genome = PromptGenome(t, SPACE)
    p = Prompt(shots=(0, 1, 2))
    row = t.rows("train")[1]
    assert [s["id"] for s in genome.task(p).shots(row)] == [t.rows("train")[i]["id"] for i in (0, 2)]


def test_mutation_is_seeded_and_changes_one_gene():
    genome = PromptGenome(task(), SPACE)
    walk = [[], []]
    for out in walk:
        rng, p = random.Random(7), genome.start()
        for _ in range(50):
            q = genome.mutate(p, rng)
            assert sum(getattr(q, g) != getattr(p, g) for g in GENES) == 1
            if q.shots != p.shots:
                assert abs(len(q.shots) - len(p.shots)) <= 1 and len(q.shots) <= SPACE.max_shots
            out.append(q)
            p = q
    assert walk[0] == walk[1]
    assert {g for a, b in zip(walk[0], walk[0][1:]) for g in GENES if getattr(a, g) != getattr(b, g)} == set(GENES) - {"tools"}  # tools: an environment's


def test_crossover_takes_each_gene_from_a_parent():
    genome = PromptGenome(task(), SPACE)
    a, b = Prompt(1, 0, 1, (3,)), Prompt(2, 1, 0, (5, 6))
    kids = [genome.crossover(a, b, random.Random(i)) for i in range(40)]
    assert all(getattr(k, g) in (getattr(a, g), getattr(b, g)) for k in kids for g in GENES)
    assert len(set(kids)) > 4


def test_a_prompt_renders_its_genes_and_its_format_line_literally():
    t = task()
    genome = PromptGenome(t, SPACE)
    p = Prompt(system=1, template=1, format=1, shots=(4,))
    row, shot = t.rows("test")[0], t.rows("train")[4]
    text = genome.task(p).prompt_text(None, row)
    assert text == (f"You add numbers.\n\nCompute {shot['question']}.\nAnswer with {{the number}} only.\n\n"
                    f"{shot['answer']}\n\nCompute {row['question']}.\nAnswer with {{the number}} only.\n\n")
    assert t.prompt_text(None, row) == f"{row['question']}\n\n"  # the task itself is untouched
    assert genome.describe(p)["shots"] == [{"id": shot["id"], "question": shot["question"]}]


def test_prompts_are_plain_data_and_bad_ones_are_refused():
    genome = PromptGenome(task(), SPACE)
    p = Prompt(2, 1, 1, (0, 9))
    assert Prompt.from_json(p.to_json(), "x") == p and Prompt.from_json(Prompt().to_json(), "x") == Prompt()
    assert Prompt.from_json({**Prompt().to_json(), "tools": 2}, "x") == Prompt(tools=2)  # an environment's gene
    with pytest.raises(DataError, match="history.jsonl: a prompt is an object with system, template"):
        Prompt.from_json({"system": 0}, "history.jsonl")
    with pytest.raises(DataError, match="integers"):
        Prompt.from_json({"system": "0", "template": 0, "format": 0, "shots": None}, "h")
    with pytest.raises(DataError, match="system 3 is not one of the 3 alternatives"):
        genome.check(Prompt(system=3), "h")
    with pytest.raises(DataError, match="at most 3 distinct indices of the 40 train rows"):
        genome.check(Prompt(shots=(1, 1)), "h")


def test_a_space_with_nothing_to_change_keeps_the_prompt():
    genome = PromptGenome(task(), PromptSpace(max_shots=0))
    assert genome.mutable() == [] and genome.mutate(genome.start(), random.Random(0)) == genome.start()


def test_the_recipe_section_is_checked():

    from hyper_es.errors import RecipeError
    from hyper_es.recipe import recipe_from_dict

    from recipes import tiny_data

    data = tiny_data()
    data["coevolve"] = {"tasks": {"nope": {"templates": ["{question}?"]}}}
    with pytest.raises(RecipeError, match="coevolve.tasks.nope: unknown task"):
        recipe_from_dict(data, "tiny.yaml")
    data["coevolve"] = {"tasks": {data["tasks"][0]["name"]: {}}, "population": 2, "elite": 3}
    with pytest.raises(RecipeError, match="elite .3. must be at most population .2."):
        recipe_from_dict(data, "tiny.yaml")


def test_each_candidate_is_scored_with_its_own_prompt(tiny_path):
    """Scorer.score_many with one task list per candidate: the Scores equal scoring each (x, prompt) alone, and the
    prompt is what the engine saw (HF engine; the vLLM LoRA batch is checked in test_engine_lora.py)."""
    from hyper_es import models
    from hyper_es.engine.hf_resident import HFResident
    from hyper_es.engine.sources import ESSource
    from hyper_es.es.scope import es_tensors
    from hyper_es.es.member import Member
    from hyper_es.fitness import Scorer

    model, tok = models.load(str(tiny_path), dtype="float32")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    engine = HFResident(model, tok, ESSource(es_tensors(shapes, "all_linear", r"\.layers\.(\d+)\.")))
    t = task()
    t.cfg = t.cfg.model_copy(update={"max_tokens": 6})
    genome = PromptGenome(t, SPACE)
    prompts = [genome.start(), Prompt(system=1, format=1), Prompt(template=1, shots=(0, 1))]
    views = [genome.task(p) for p in prompts]
    rows = {"t": t.rows("train")[:4]}
    scorer = Scorer(engine, tok, [t])
    xs = [None, Member(3, 1.0), Member(3, 1.0)]
    kw = {"samples": 2, "temperature": 1.0, "seed": 5, "reward": lambda completion, ref: len(completion) / 10}
    batched = scorer.score_many(xs, rows, tasks=[[v] for v in views], **kw)
    alone = [scorer.score(x, rows, tasks=[v], **kw) for x, v in zip(xs, views)]
    assert [(b.reward, b.per_row, b.tokens) for b in batched] == [(a.reward, a.per_row, a.tokens) for a in alone]
    assert scorer.score(None, rows, **kw).per_row == batched[0].per_row  # the start prompt is the task's own
    ids = [scorer._prompt_ids(v, rows["t"])[0] for v in views]
    assert ids[0] == tok(t.prompt_text(tok, rows["t"][0]), add_special_tokens=False)["input_ids"]
    assert len({tuple(i) for i in ids}) == 3  # three prompts, three token sequences
    with pytest.raises(ValueError, match="3 genomes but 2 task lists"):
        scorer.score_many(xs, rows, tasks=[[views[0]]] * 2)


def test_an_exported_prompt_renders_the_scored_text(tiny_path):
    from transformers import AutoTokenizer

    from hyper_es.errors import HyperESError
    from hyper_es.tasks.prompt_genome import render_exported

    tok = AutoTokenizer.from_pretrained(tiny_path)
    for chat in (False, True):
        t = task(chat=chat)
        genome = PromptGenome(t, SPACE)
        p = Prompt(system=2, template=1, format=1, shots=(4, 7))
        exported = json.loads(json.dumps(genome.exported(p)))  # plain data
        for row in t.rows("test")[:5]:
            assert render_exported(exported, row, tok) == genome.task(p).prompt_text(tok, row)
    drawn = PromptGenome(task(2), SPACE)
    with pytest.raises(HyperESError, match="draws its few-shot examples per row"):
        drawn.exported(drawn.start())
