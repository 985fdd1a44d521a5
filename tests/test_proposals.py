"""Co-evolution's optional proposer (tasks/proposals.py): a served model's rewrites of a task's template become
template alternatives when they keep its placeholders; they are asked for once a run, kept in RUN/proposals.json with
every text the model gave, and read back (never generated again) by a resumed search and the final evaluation."""

import json

import pytest

from hyper_es import DataError, models
from hyper_es.tasks.proposals import PROPOSALS, accept, asked, propose, read_proposals, with_proposals

OWN = "What is {question}? Answer with the number."


@pytest.mark.parametrize("text, kept, why", [
    ("  Compute {question} and give one number.\n", "Compute {question} and give one number.", "kept"),
    ("Compute the sum.", None, "placeholders [], not ['question']"),
    ("Compute {question} for {name}.", None, "placeholders ['name', 'question'], not ['question']"),
    ("Compute {question", None, "unbalanced braces"),
    ("   ", None, "empty"),
    (OWN, None, "already a template"),
    ("{question} " + "x" * 600, None, "too long"),
])
def test_a_rewrite_is_kept_only_with_the_templates_placeholders(text, kept, why):
    assert accept(text, OWN, [OWN]) == (kept, why)


class Replies:
    """A generator that answers with fixed texts (unit level: what the proposer makes of a model's replies)."""

    backend = "stub"
    max_model_len = 2048

    def __init__(self, tok, texts):
        self.tok, self.texts, self.calls = tok, texts, []

    def generate(self, prompts, sampling, seeds=None):
        self.calls.append((prompts, sampling, seeds))
        return [[self.tok(t, add_special_tokens=False)["input_ids"] for t in self.texts[: sampling.n]]]


def _recipe(tmp_path, propose=3, directions=False, **coevolve):
    """The small search recipe with a proposer; its directions are trained only where a test searches."""
    from test_search_run import small_search_recipe

    if not directions:
        (tmp_path / "run" / "directions").mkdir(parents=True, exist_ok=True)  # small_search_recipe: nothing to collect
    name = small_search_recipe(tmp_path).tasks[0].name
    space = {"templates": ["Sum: {question}"], "max_shots": 0, "propose": propose}
    return small_search_recipe(tmp_path, coevolve={"tasks": {name: space}, "population": 3, "pairs": 2, "seed": 1,
                                                   **coevolve}), name


def test_propose_keeps_every_reply_and_why(tmp_path):
    recipe, name = _recipe(tmp_path)
    own = recipe.task(name).prompt.template
    tok = models.load(recipe.model.name)[1]
    new = "Add these up: {question}"
    gen = Replies(tok, [new, "Just add.", new])
    record = propose(recipe, gen, tok)
    (prompt_ids,), sampling, seeds = gen.calls[0]
    assert own in tok.decode(prompt_ids) and sampling.n == 3 and sampling.temperature > 0 and seeds == [1000]
    assert record["asked"] == asked(recipe) == {"model": recipe.model.name, "seed": 1,
                                                "tasks": {name: {"template": own, "n": 3}}}
    assert record["tasks"][name]["kept"] == [new]
    assert [(p["text"], p["kept"], p["why"]) for p in record["tasks"][name]["proposals"]] == [
        (new, True, "kept"), ("Just add.", False, "placeholders [], not ['question']"),
        (new, False, "already a template")]
    assert record["tokens"] == sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in gen.texts)


def test_the_kept_rewrites_are_template_genes_after_the_recipes_own(tmp_path):
    recipe, name = _recipe(tmp_path)
    run = tmp_path / "run"
    with pytest.raises(DataError, match=f"{PROPOSALS}: missing"):
        read_proposals(recipe, run)
    record = {"asked": asked(recipe), "tasks": {name: {"proposals": [], "kept": ["Total of {question}?"]}},
              "tokens": 7, "seconds": 0.5}
    (run / PROPOSALS).write_text(json.dumps(record))
    grown = with_proposals(recipe, run)
    assert grown.coevolve.tasks[name].templates == ["Sum: {question}", "Total of {question}?"]
    assert grown.coevolve.tasks[name].propose == 0 and recipe.coevolve.tasks[name].propose == 3
    assert with_proposals(grown, run) == grown  # nothing left to propose: the file is not read again
    other, _ = _recipe(tmp_path, propose=2)
    with pytest.raises(DataError, match="other rewrites than this recipe's"):
        read_proposals(other, run)
    record["tasks"][name]["kept"] = ["Total?"]
    (run / PROPOSALS).write_text(json.dumps(record))
    with pytest.raises(DataError, match="not a rewrite of the task's template"):
        read_proposals(recipe, run)


def test_a_search_proposes_once_and_the_evaluation_renders_a_proposed_template(tmp_path, monkeypatch):
    """`hyper-es search` (HF, tiny model): the proposer runs before the search's engine, its file is read again on
    resume (no second proposer), and a +prompt row whose template gene is a rewrite renders that rewrite."""
    import hyper_es.engine as engine
    from hyper_es.evaluate.final import Row, prompted, run_prompts
    from hyper_es.search.run import search
    from hyper_es.tasks import Task

    recipe, name = _recipe(tmp_path, directions=True)
    recipe.search.max_generations = 1
    run = tmp_path / "run"
    search(recipe, run, backend="hf", score_test=False)
    record = json.loads((run / PROPOSALS).read_text())
    assert record["asked"] == asked(recipe) and len(record["tasks"][name]["proposals"]) == 3 and record["tokens"] > 0
    monkeypatch.setattr(engine, "make_generator", lambda *a, **k: pytest.fail("proposed again"))
    search(recipe, run, backend="hf", score_test=False)
    from hyper_es.report import run_report  # the proposer's tokens and seconds are the search's too

    log = [json.loads(x) for x in (run / "search" / "generations.jsonl").read_text().splitlines()]
    result = json.loads((run / "search" / "result.json").read_text())
    searched = run_report(recipe, run, [])["search"]
    assert searched["tokens"] == sum(r["tokens"] for r in log) + record["tokens"]
    assert searched["seconds"] == pytest.approx(result["cost"]["total"]["seconds"])
    assert result["cost"]["phases"]["proposals"] == {"steps": 0, "train_tokens": 0, "search_tokens": record["tokens"],
                                                     "select_tokens": 0, "seconds": record["seconds"]}

    record["tasks"][name]["kept"] = ["Total of {question}?"]  # the random tiny model's replies keep no placeholder
    (run / PROPOSALS).write_text(json.dumps(record))
    tasks = [Task(t, recipe.base_dir) for t in recipe.tasks]
    row = Row("hyper-es+prompt", "hyper-es", prompt={name: {"system": 0, "template": 2, "format": 0, "shots": []}})
    view = {t.name: t for t in prompted(run_prompts(recipe, run), tasks, row)}[name]
    question = view.rows("test")[0]
    assert view.prompt_text(models.load(recipe.model.name)[1], question).count(f"Total of {question['question']}?")
