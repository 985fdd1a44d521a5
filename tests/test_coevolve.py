"""Co-evolution as a strategy around CMA-ES (search/coevolve.py), on a toy fitness of (coefficients, prompt genes):
frozen genes reproduce the parameter-only run exactly, a run killed mid-generation resumes to the same history,
pairs are balanced, and the best prompt survives selection."""

from pathlib import Path

import numpy as np
import pytest
from test_prompt_genome import SPACE, task

from hyper_es import DataError
from hyper_es.recipe import CoevolveConfig, PromptSpace
from hyper_es.search.coevolve import Coevolution
from hyper_es.search.driver import Budget, CMASearch
from hyper_es.search.loop import drive
from hyper_es.tasks.prompt_genome import PromptGenome


def toy(x, genes=None) -> float:
    """Higher near x = 1; a prompt adds its system and format gene (the best prompt: system 2, format 1)."""
    bonus = 0.0 if genes is None else 0.05 * genes.system + 0.1 * genes.format
    return -float(np.sum((np.asarray(x) - 1.0) ** 2)) + bonus


def strategy(out, space=SPACE, **cfg):
    t = task()
    inner = CMASearch(np.zeros(3), 0.5, popsize=6, seed=1, budget=Budget(max_generations=5), out=out)
    co = Coevolution(inner, {"t": PromptGenome(t, space)}, [t], CoevolveConfig(tasks={"t": space}, **cfg))
    return co, inner


def evaluate(co):
    return lambda pairs, generation: ([toy(p.x, co.population[p.prompt]["t"]) for p in pairs], {})


def history(inner) -> list:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in inner.records()]


def test_frozen_prompt_genes_reproduce_the_parameter_only_run(tmp_path):
    co, inner = strategy(tmp_path / "co", PromptSpace(max_shots=0), population=4, pairs=2)
    assert co.population == [{"t": co.genomes["t"].start()}]  # nothing can change: the task's own prompt alone
    drive(co, evaluate(co))
    alone = CMASearch(np.zeros(3), 0.5, popsize=6, seed=1, budget=Budget(max_generations=5), out=tmp_path / "p")
    drive(alone, lambda xs, g: ([toy(x) for x in xs], {}))
    assert inner.state.candidates == alone.state.candidates and inner.state.scores == alone.state.scores
    assert inner.state.best_x == alone.state.best_x


def test_a_run_killed_mid_generation_resumes_to_the_same_history(tmp_path):
    co, whole = strategy(tmp_path / "whole", population=4, pairs=2)
    drive(co, evaluate(co))

    class Killed(Exception):
        pass

    co, _ = strategy(tmp_path / "cut", population=4, pairs=2)
    score = evaluate(co)

    def dies(pairs, generation):
        if generation == 3:
            raise Killed
        return score(pairs, generation)

    with pytest.raises(Killed):
        drive(co, dies)
    co, resumed = strategy(tmp_path / "cut", population=4, pairs=2)  # a new process: replayed from disk
    assert len(resumed.records()) == 3
    drive(co, evaluate(co))
    assert history(resumed) == history(whole)
    assert len({str(r["coevolve"]["population"]) for r in history(whole)}) > 1  # the prompts did evolve


def test_pairs_are_balanced_and_each_candidate_is_told_its_mean(tmp_path):
    co, inner = strategy(tmp_path, population=3, pairs=2)
    pairs = co.ask()
    assert len(co.population) == 3 and len(pairs) == 12
    met = [[p.prompt for p in pairs[i:i + 2]] for i in range(0, 12, 2)]
    assert all(len(set(m)) == 2 for m in met)
    assert sorted(sum(met, [])) == [0] * 4 + [1] * 4 + [2] * 4
    fitness = [float(i) for i in range(12)]
    record = co.tell(pairs, fitness)
    assert inner.state.scores[-1] == [0.5 + 2 * i for i in range(6)]
    assert record["coevolve"]["pairs"] == met
    xs, tasks = co.split(pairs)
    assert len(xs) == len(tasks) == 12 and all(len(ts) == 1 for ts in tasks)


def test_the_best_prompt_is_kept_and_the_population_stays_distinct(tmp_path):
    co, inner = strategy(tmp_path, population=4, pairs=4, elite=1)
    drive(co, evaluate(co))
    for record in inner.records():
        state = record["coevolve"]
        pop = [str(p) for p in state["population"]]
        assert len(set(pop)) == len(pop) <= 4
    last, best = inner.records()[-1]["coevolve"], inner.records()[-2]["coevolve"]
    assert best["population"][best["best"]] == last["population"][0]  # elite 1: the best prompt comes first
    genes = co.genomes["t"]
    final = co.describe(co.population[0])["t"]
    assert final["system"] in genes.systems and final["format"] in genes.formats


def test_a_recorded_population_from_other_settings_is_refused(tmp_path):
    co, _ = strategy(tmp_path, population=4, pairs=2)
    drive(co, evaluate(co))
    with pytest.raises(DataError, match="record 1: the recorded prompt population is not the one"):
        strategy(tmp_path, population=4, pairs=2, seed=9)


def _search_recipe(tmp_path, coevolve=None):
    from test_search_run import small_search_recipe

    recipe = small_search_recipe(tmp_path, coevolve=coevolve)
    return recipe, recipe.tasks[0].name


def test_a_search_with_frozen_prompt_genes_is_the_parameter_only_search(tmp_path):
    """`hyper-es search` (HF engine, tiny model, real directions): co-evolution with nothing to change gives the
    parameter-only search's generations and rows exactly."""
    import json
    import shutil

    from hyper_es.search.run import search

    plain_recipe, name = _search_recipe(tmp_path)
    plain = search(plain_recipe, tmp_path / "run", backend="hf")
    plain_log = (tmp_path / "run/search/generations.jsonl").read_text().splitlines()
    shutil.rmtree(tmp_path / "run/search")
    frozen_recipe, _ = _search_recipe(tmp_path, {"tasks": {name: {"max_shots": 0}}, "population": 3, "pairs": 2})
    frozen = search(frozen_recipe, tmp_path / "run", backend="hf")

    log = [json.loads(x) for x in (tmp_path / "run/search/generations.jsonl").read_text().splitlines()]
    keys = ("generation", "best", "mean", "best_x", "sigma")
    assert [{k: r[k] for k in keys} for r in log] == [{k: json.loads(x)[k] for k in keys} for x in plain_log]
    assert all(r["coevolve"]["population"] == [{name: {"system": 0, "template": 0, "format": 0, "shots": []}}]
               for r in log)
    assert {k: (v["val"], v["test"]) for k, v in frozen["rows"].items()} == \
        {k: (v["val"], v["test"]) for k, v in plain["rows"].items()}
    assert frozen["prompt"]["genes"] == {name: {"system": 0, "template": 0, "format": 0, "shots": []}}


def test_a_coevolution_search_records_and_resumes_its_prompts(tmp_path):
    import json

    from hyper_es.search.run import search

    space = {"systems": ["Add the numbers."], "templates": ["Sum: {question}"], "formats": ["Give one number."],
             "max_shots": 2}
    _, name = _search_recipe(tmp_path)
    recipe, name = _search_recipe(tmp_path, {"tasks": {name: space}, "population": 3, "pairs": 2, "seed": 1})
    result = search(recipe, tmp_path / "run", backend="hf")
    log = [json.loads(x) for x in (tmp_path / "run/search/generations.jsonl").read_text().splitlines()]
    assert all(len(r["coevolve"]["population"]) == 3 and len(r["coevolve"]["pairs"]) == 4 for r in log)
    assert all("prompt" in v for r in log for v in r["val"])
    saved = json.loads((tmp_path / "run/search/prompt.json").read_text())
    assert saved == result["prompt"] and set(saved["prompt"][name]) == {"genes", "system", "template", "format",
                                                                      "shots"}
    again = search(recipe, tmp_path / "run", backend="hf")  # resumes from the checkpoint: the same answer
    assert again["prompt"] == result["prompt"] and again["best_val_generation_entry"] == \
        result["best_val_generation_entry"]

    # the export: a row renders to the exact text the search scored with this prompt
    from hyper_es import models
    from hyper_es.export import export_prompt
    from hyper_es.tasks import Task
    from hyper_es.tasks.prompt_genome import Prompt, PromptGenome, render_exported

    (tmp_path / "export").mkdir()
    path = export_prompt(tmp_path / "run/search/prompt.json", tmp_path / "export")
    exported = json.loads(path.read_text())["tasks"][name]
    task = Task(recipe.task(name), recipe.base_dir)
    genome = PromptGenome(task, recipe.coevolve.tasks[name])
    view = genome.task(Prompt.from_json(result["prompt"]["genes"][name], "result"))
    tok = models.load(recipe.model.name)[1]
    for row in task.rows("test")[:5]:
        assert render_exported(exported, row, tok) == view.prompt_text(tok, row)


def test_a_coevolution_search_killed_mid_generation_resumes_to_the_same_history(tmp_path, monkeypatch):
    import json
    import shutil

    import hyper_es.search.loop as loop
    from hyper_es.search.run import search

    _, name = _search_recipe(tmp_path)
    space = {"systems": ["Add the numbers."], "formats": ["Give one number."], "max_shots": 1}
    recipe, _ = _search_recipe(tmp_path, {"tasks": {name: space}, "population": 2, "pairs": 2})
    recipe.search.max_generations = 3
    search(recipe, tmp_path / "run", backend="hf")
    keys = ("generation", "best", "mean", "best_x", "sigma", "coevolve", "val")

    def history():
        return [{k: json.loads(x)[k] for k in keys}
                for x in (tmp_path / "run/search/generations.jsonl").read_text().splitlines()]

    whole = history()
    shutil.rmtree(tmp_path / "run/search")
    real = loop.generation_scores

    class Killed(Exception):
        pass

    def dies(*args, **kw):
        if args[4] == 2:  # generation 2, after its candidates were asked for
            raise Killed
        return real(*args, **kw)

    monkeypatch.setattr(loop, "generation_scores", dies)
    with pytest.raises(Killed):
        search(recipe, tmp_path / "run", backend="hf")
    monkeypatch.setattr(loop, "generation_scores", real)
    assert len(history()) == 2
    search(recipe, tmp_path / "run", backend="hf")  # a new start on the same folder
    assert history() == whole


def test_the_final_evaluation_scores_the_coevolved_prompt_and_reports_it(tmp_path, monkeypatch):
    """After a co-evolution search, the final evaluation adds hyper-es+prompt: the searched weights scored with the
    search's prompt (rendered to the exact text the export serves), beside hyper-es with the tasks' own prompts, at
    the same cost; the report gives the prompt in full."""
    import json

    import hyper_es.evaluate.final as final
    from hyper_es import models
    from hyper_es.export import export_prompt
    from hyper_es.pipeline import evaluate_and_report
    from hyper_es.search.run import search
    from hyper_es.tasks.prompt_genome import render_exported

    _, name = _search_recipe(tmp_path)
    space = {"systems": ["Add the numbers."], "templates": ["Sum: {question}"], "max_shots": 2}
    recipe, _ = _search_recipe(tmp_path, {"tasks": {name: space}, "population": 3, "pairs": 2, "seed": 1})
    search(recipe, tmp_path / "run", backend="hf", score_test=False)
    # On the random tiny model the guard keeps the start (reward 0 everywhere); the evaluation scores whatever
    # prompt search/prompt.json holds, so give it one where every gene differs from the task's own.
    from hyper_es.tasks import Task
    from hyper_es.tasks.prompt_genome import Prompt, task_prompts

    prompts = task_prompts(recipe, [Task(t, recipe.base_dir) for t in recipe.tasks])
    genes = {name: Prompt(system=1, template=1, shots=(3, 5))}
    (tmp_path / "run/search/prompt.json").write_text(json.dumps({
        "genes": prompts.to_json(genes), "prompt": prompts.describe(genes), "exported": prompts.exported(genes)}))
    seen, real = {}, final.prompted
    monkeypatch.setattr(final, "prompted", lambda prompts, tasks, row: seen.setdefault(
        row.name, real(prompts, tasks, row)))
    report = evaluate_and_report(recipe, tmp_path / "run", "hf")

    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows)[-2:] == ["hyper-es+prompt", "hyper-es"]
    keys = ("optimizer_steps", "train_tokens", "search_tokens", "select_tokens", "wall_s")
    assert {k: rows["hyper-es+prompt"][k] for k in keys} == {k: rows["hyper-es"][k] for k in keys}
    saved = json.loads((tmp_path / "run/search/prompt.json").read_text())
    (tmp_path / "export").mkdir()
    exported = json.loads(export_prompt(tmp_path / "run/search/prompt.json", tmp_path / "export").read_text())["tasks"][name]
    tok = models.load(recipe.model.name)[1]
    own = {t.name: t for t in seen["hyper-es"]}[name]
    with_prompt = {t.name: t for t in seen["hyper-es+prompt"]}[name]
    for row in own.rows("test")[:8]:
        assert with_prompt.prompt_text(tok, row) == render_exported(exported, row, tok)
        assert own.prompt_text(tok, row) != with_prompt.prompt_text(tok, row)
    assert report["prompts"] == {"hyper-es+prompt": saved}
    md = (tmp_path / "run/report.md").read_text()
    assert "## The co-evolved prompt (hyper-es+prompt)" in md and json.dumps(saved["prompt"][name]["system"]) in md
    for r in ("hyper-es+prompt", "hyper-es"):
        rec = json.loads((tmp_path / f"run/eval/{r}.json").read_text())["results"][name]["records"]
        assert len(rec["ids"]) == 8

    # A co-evolved prompt that is the task's own renders the same text as hyper-es: its row is taken, not re-scored.
    genes = prompts.start()
    (tmp_path / "run/search/prompt.json").write_text(json.dumps({
        "genes": prompts.to_json(genes), "prompt": prompts.describe(genes), "exported": prompts.exported(genes)}))
    (tmp_path / "run/eval/hyper-es+prompt.json").unlink()
    monkeypatch.setattr(final, "score_test_sets", lambda *a, **kw: pytest.fail("scored again"))
    evaluate_and_report(recipe, tmp_path / "run", "hf")
    twin, same = (json.loads((tmp_path / f"run/eval/{r}.json").read_text()) for r in ("hyper-es", "hyper-es+prompt"))
    assert same == {**twin, "name": "hyper-es+prompt", "same_as": "hyper-es"}


def test_the_prompt_only_ablation_keeps_the_weights_at_the_start_for_the_searched_runs_scorings(tmp_path):
    """coevolve.weights: fixed: every vector is x0 (the search's start) and only the prompts evolve; each generation
    meets every prompt once, over as many generations as score the searched run's vectors; it resumes."""
    import json

    import numpy as np

    import hyper_es as hx
    from hyper_es.search.run import search

    _, name = _search_recipe(tmp_path)
    space = {"systems": ["Add the numbers."], "templates": ["Sum: {question}"], "max_shots": 2}
    recipe, _ = _search_recipe(tmp_path, {"tasks": {name: space}, "population": 3, "pairs": 2, "weights": "fixed"})
    recipe.fitness.rescore_top = 2
    result = search(recipe, tmp_path / "run", backend="hf")
    ck = json.loads((tmp_path / "run/search/checkpoint.json").read_text())
    x0 = ck["config"]["x0"]
    assert ck["config"]["weights"] == "fixed" and ck["config"]["popsize"] == 2  # ⌈3 prompts / 2 pairs⌉ vectors
    assert len(ck["candidates"]) == 4  # the searched run: 4 vectors × 2 generations = 8 = 4 generations × 2
    assert all(x == x0 for gen in ck["candidates"] for x in gen)
    log = [json.loads(x) for x in (tmp_path / "run/search/generations.jsonl").read_text().splitlines()]
    assert all({j for js in r["coevolve"]["pairs"] for j in js} == {0, 1, 2} for r in log)  # every prompt met
    assert [len(r["val"]) for r in log] == [1] * 4  # the searched run's 2 × 2 validation re-scores, over 4
    _, x = hx.Genome.from_json(tmp_path / "run/search/best.json")
    assert np.allclose(x, x0)
    assert search(recipe, tmp_path / "run", backend="hf")["prompt"] == result["prompt"]  # resumed: the same


def _es_recipe(tmp_path, coevolve=None):
    from recipes import tiny_recipe

    return tiny_recipe(tmp_path, {"es": {"population": 4, "iterations": 3, "sigma": 0.02, "alpha": 0.01},
                                  "fitness": {"minibatch": 4, "val_size": 4, "fitness_set": "fixed",
                                              "reward": "dense_reward:length_fraction"},
                                  **({"coevolve": coevolve} if coevolve else {})})


def _es_engine(recipe):
    from test_es_run import _engine

    return _engine(recipe)


def test_es_coevolves_prompts_resumes_to_the_same_history_and_frozen_genes_are_plain_es(tmp_path, monkeypatch):
    """ES as co-evolution's inner strategy: the prompt population and pairing go into ES's history; a run killed
    after two iterations resumes to the same history and weights; with no gene that can change it is plain ES."""
    import json

    import torch

    from hyper_es.es.history import HISTORY
    from hyper_es.search.es_run import es_search

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "helpers"))
    plain = _es_recipe(tmp_path)
    es_search(plain, tmp_path / "plain", *_es_engine(plain))
    name = plain.tasks[0].name
    frozen = _es_recipe(tmp_path, {"tasks": {name: {"max_shots": 0}}, "population": 2, "pairs": 2})
    es_search(frozen, tmp_path / "frozen", *_es_engine(frozen))
    keys = ("seeds", "signs", "rewards", "z")
    lines = [[json.loads(x) for x in (tmp_path / d / "es" / HISTORY).read_text().splitlines()]
             for d in ("plain", "frozen")]
    assert [{k: r[k] for k in keys} for r in lines[1]] == [{k: r[k] for k in keys} for r in lines[0]]

    space = {"systems": ["Add the numbers."], "templates": ["Sum: {question}"], "max_shots": 2}
    recipe = _es_recipe(tmp_path, {"tasks": {name: space}, "population": 3, "pairs": 2, "seed": 1})
    engine, tok = _es_engine(recipe)
    result = es_search(recipe, tmp_path / "a", engine, tok)
    want = {n: w.clone() for n, w in engine.weights().items()}
    hist = (tmp_path / "a" / "es" / HISTORY).read_text().splitlines()
    states = [json.loads(h)["coevolve"] for h in hist]
    assert len(hist) == 3 and all(len(s["population"]) == 3 and len(s["pairs"]) == 4 for s in states)
    assert len({json.dumps(s["population"]) for s in states}) > 1  # the prompts evolved
    saved = json.loads((tmp_path / "a" / "es" / "prompt.json").read_text())
    start = {name: {"system": 0, "template": 0, "format": 0, "shots": []}}  # θ_0 keeps the tasks' own prompt
    best = states[-1]["population"][states[-1]["best"]]  # the last generation's best by fitness
    assert saved["genes"] == (best if result["kept_iterations"] else start)
    (tmp_path / "b" / "es").mkdir(parents=True)
    (tmp_path / "b" / "es" / HISTORY).write_text("\n".join(hist[:2]) + "\n" + hist[2][:20])
    (tmp_path / "b" / "es" / "start.json").write_text((tmp_path / "a" / "es" / "start.json").read_text())
    engine2, tok2 = _es_engine(recipe)
    resumed = es_search(recipe, tmp_path / "b", engine2, tok2)
    assert (tmp_path / "b" / "es" / HISTORY).read_text().splitlines() == hist
    assert all(torch.equal(engine2.weights()[n], want[n]) for n in want)
    assert resumed["guard"] == result["guard"]
    assert json.loads((tmp_path / "b" / "es" / "prompt.json").read_text()) == saved


def test_the_final_evaluation_adds_es_plus_prompt_after_an_es_coevolution(tmp_path, monkeypatch):
    """A run whose ES co-evolved a prompt (RUN/es/prompt.json) gets es+prompt: ES's weights scored with that prompt,
    at ES's cost, beside es with the tasks' own prompts."""
    import json

    import hyper_es as hx
    import hyper_es.evaluate.final as final
    from hyper_es.pipeline import evaluate_and_report
    from hyper_es.search.es_run import es_search
    from test_es_run import _finished_run

    done = _finished_run(tmp_path, limit=8, population=4, iterations=2)
    name = done.tasks[0].name
    data = done.model_dump(mode="json")
    data["coevolve"] = {"tasks": {name: {"systems": ["Add the numbers."], "max_shots": 2}}, "population": 3,
                        "pairs": 2}
    recipe = hx.recipe.recipe_from_dict(data, tmp_path / "recipe.yaml")
    es_search(recipe, tmp_path / "run", *_es_engine(recipe))
    (tmp_path / "run/es/config.json").write_text(json.dumps({"es": recipe.es.model_dump(mode="json")}))
    # ES on the random tiny model keeps the task's own prompt (then es+prompt is es's row, not scored again): give
    # it one that differs, as the search test does
    from hyper_es.tasks import Task
    from hyper_es.tasks.prompt_genome import Prompt, task_prompts

    prompts = task_prompts(recipe, [Task(t, recipe.base_dir) for t in recipe.tasks])
    genes = {name: Prompt(system=1, shots=(0, 1))}
    (tmp_path / "run/es/prompt.json").write_text(json.dumps({
        "genes": prompts.to_json(genes), "prompt": prompts.describe(genes), "exported": prompts.exported(genes)}))
    saved = json.loads((tmp_path / "run/es/prompt.json").read_text())
    seen, real = {}, final.prompted
    monkeypatch.setattr(final, "prompted", lambda prompts, tasks, row: seen.setdefault(
        row.name, real(prompts, tasks, row)))
    report = evaluate_and_report(recipe, tmp_path / "run", "hf")
    rows = {r["name"]: r for r in report["rows"]}
    assert rows["es+prompt"]["kind"] == "es" and rows["es+prompt"]["search_tokens"] == rows["es"]["search_tokens"] > 0
    view = {t.name: t for t in seen["es+prompt"]}[name]
    assert view.prompt_key.to_json() == saved["genes"][name]
    assert {t.name: t for t in seen["es"]}[name].__dict__.get("prompt_key") is None  # es: the tasks' own prompt
    assert len(rows["es+prompt"]["results"][name]) > 0 and "pass@1" in rows["es+prompt"]["results"][name]
    assert report["prompts"] == {"es+prompt": saved}
    assert "## The co-evolved prompt (es+prompt)" in (tmp_path / "run/report.md").read_text()
    # exporting that row serves its prompt beside its weights; the es row alone has none
    from typer.testing import CliRunner

    from hyper_es.cli import app

    for row, folder in (("es+prompt", "with"), ("es", "without")):
        out = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--format", "peft", "--out",
                                       str(tmp_path / folder), "--row", row])
        assert out.exit_code == 0, out.output
    written = json.loads((tmp_path / "with" / "prompt.json").read_text())
    assert written["tasks"] == saved["exported"] and written["from"] == "es/prompt.json"
    assert not (tmp_path / "without" / "prompt.json").exists()


def test_a_prompt_control_chooses_one_gene_on_validation_and_is_tested_exported_and_charged(tmp_path, monkeypatch):
    """coevolve.controls: a fixed row's weights with the best of the own prompt and each one-gene change, chosen on
    validation (a stand-in validation score at unit level; the test scoring is real), as <row>+prompt; its scan is
    kept per candidate (a re-run scores nothing again), charged to the row, reported and exported with it."""
    import json

    from typer.testing import CliRunner

    import hyper_es.evaluate.final as final
    from hyper_es.cli import app
    from hyper_es.errors import DataError
    from hyper_es.pipeline import evaluate_and_report

    _, name = _search_recipe(tmp_path)
    space = {"systems": ["Add the numbers."], "formats": ["Reply with the final answer only."], "max_shots": 0}
    recipe, _ = _search_recipe(tmp_path, {"tasks": {name: space}, "controls": ["dir-0"]})
    calls = []

    def val_scores(engine, tok, tasks, size):  # format line 1 wins
        p = getattr(tasks[0], "prompt_key", None)
        calls.append(p)
        mean = 1.0 if p is not None and p.format == 1 else 0.5
        return {"tasks": {tasks[0].name: mean}, "mean": mean, "rows": size, "tokens": 10, "seconds": 1.0}

    monkeypatch.setattr(final, "validation_scores", val_scores)
    seen, real = {}, final.prompted
    monkeypatch.setattr(final, "prompted", lambda prompts, tasks, row: seen.setdefault(
        row.name, real(prompts, tasks, row)))
    report = evaluate_and_report(recipe, tmp_path / "run", "hf")

    choice = json.loads((tmp_path / "run/eval/val/dir-0+prompt.json").read_text())
    assert choice["genes"] == {name: {"system": 0, "template": 0, "format": 1, "shots": []}}
    assert choice["scan"] == {name: [0.5, 0.5, 1.0]} and choice["tokens"] == 30  # own, system 1, format 1
    rows = {r["name"]: r for r in report["rows"]}
    assert rows["dir-0+prompt"]["kind"] == "direction"
    assert rows["dir-0+prompt"]["select_tokens"] == rows["dir-0"]["select_tokens"] + 30
    assert {t.name: t for t in seen["dir-0+prompt"]}[name].cfg.prompt.template.endswith(
        "\nReply with the final answer only.")
    assert report["prompts"]["dir-0+prompt"] == choice
    assert "## The chosen prompt (dir-0+prompt)" in (tmp_path / "run/report.md").read_text()
    out = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--format", "peft", "--out",
                                   str(tmp_path / "with"), "--row", "dir-0+prompt"])
    assert out.exit_code == 0, out.output
    served = json.loads((tmp_path / "with/prompt.json").read_text())
    assert served["from"] == "val/dir-0+prompt.json" and served["tasks"] == choice["exported"]

    (tmp_path / "run/eval/val/dir-0+prompt.json").unlink()  # chosen again from the kept scan: nothing re-scored
    (tmp_path / "run/eval/dir-0+prompt.json").unlink()
    calls.clear()
    evaluate_and_report(recipe, tmp_path / "run", "hf")
    assert calls == [] and json.loads((tmp_path / "run/eval/val/dir-0+prompt.json").read_text()) == choice

    bad, _ = _search_recipe(tmp_path, {"tasks": {name: space}, "controls": ["nope"]})
    with pytest.raises(DataError, match="coevolve.controls: 'nope'"):
        evaluate_and_report(bad, tmp_path / "run", "hf")
