"""Full-parameter ES on the tiny model (HF engine): history, guard, and resume by replay ending identical."""

import json
from pathlib import Path

import pytest
import torch

import hyper_es as hx
from hyper_es import models
from hyper_es.engine.hf_resident import HFResident
from hyper_es.engine.sources import ESSource
from hyper_es.es.member import Member
from hyper_es.es.scope import es_tensors
from hyper_es.es.noise import noise
from hyper_es.es.history import HISTORY
from hyper_es.search.es_run import es_search
from recipes import tiny_recipe


ROOT = Path(__file__).resolve().parents[1]
ROOT_TINY = "tiny-random"  # the recipes' tiny model (models.resolve)


def _recipe(tmp_path, **es):
    return tiny_recipe(tmp_path, {"es": {"population": 4, "iterations": 3, "sigma": 0.02, "alpha": 0.01, **es},
                                  "fitness": {"minibatch": 4, "val_size": 4, "fitness_set": "fixed"}})


def _finished_run(tmp_path, *, limit: int, reward: str | None = None, **es):
    """A whole tiny `hyper-es run` in tmp_path/run (2 one-step directions, one search generation), HF backend."""
    from hyper_es.pipeline import run

    recipe = tiny_recipe(tmp_path, {
        "gradient": {"steps": 1, "directions": 2}, "search": {"max_generations": 1, "popsize": 2},
        "fitness": {"minibatch": 4, "val_size": 4, **({"guard": False} if reward else {})},  # ES keeps its iterations,
        "es": {"sigma": 0.05, "alpha": 0.02, **es}, "eval.limit": limit,  # so its update is not zero
        **({"tasks.0.reward": reward} if reward else {})})
    run(recipe, tmp_path / "run", backend="hf")
    return recipe


def _engine(recipe, scope="all_linear"):
    model, tok = models.load(recipe.model.name, dtype="float32")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    return HFResident(model, tok, ESSource(es_tensors(shapes, scope, r"\.layers\.(\d+)\.")), max_model_len=recipe.model.max_model_len), tok


def test_member_then_restore_is_exact_and_uses_per_tensor_noise(tmp_path):
    recipe = _recipe(tmp_path)
    engine, _ = _engine(recipe)
    name = next(iter(engine.params))
    before = {n: p.detach().clone() for n, p in engine.params.items()}
    engine.set_genome(Member(5, 0.1))
    eps = noise(5, name, before[name].shape, kind=engine.source.noise)  # the engine's kind (the table by default)
    assert torch.equal(engine.params[name], torch.add(before[name], eps, alpha=0.1))
    engine.set_genome(None)
    assert all(torch.equal(engine.params[n], before[n]) for n in before)


def test_es_resume_by_replay_ends_identical(tmp_path):
    recipe = _recipe(tmp_path)
    engine, tok = _engine(recipe)
    full = es_search(recipe, tmp_path / "a", engine, tok)
    want = {n: w.clone() for n, w in engine.weights().items()}
    hist = (tmp_path / "a" / "es" / HISTORY).read_text().splitlines()
    assert len(hist) == 3 and all(len(json.loads(h)["seeds"]) == 4 for h in hist)
    for d in (json.loads(h)["diversity"] for h in hist):  # 4 fitness prompts, 4 members
        assert 1 <= d["distinct"] <= 4 and 0 <= d["solved_mean"] <= d["solved_any"] <= 1
    # a run killed after iteration 2, with a half-written third line: resumes, replays 2, runs the third
    (tmp_path / "b" / "es").mkdir(parents=True)
    (tmp_path / "b" / "es" / HISTORY).write_text("\n".join(hist[:2]) + "\n" + hist[2][:20])
    (tmp_path / "b" / "es" / "start.json").write_text((tmp_path / "a" / "es" / "start.json").read_text())
    engine2, tok2 = _engine(recipe)
    resumed = es_search(recipe, tmp_path / "b", engine2, tok2)
    assert all(torch.equal(engine2.weights()[n], want[n]) for n in want)
    assert (tmp_path / "b" / "es" / HISTORY).read_text().splitlines() == hist
    assert resumed["guard"]["kept"] == full["guard"]["kept"] and resumed["kept_iterations"] in (0, 3)


@pytest.mark.parametrize("kept", ["x0", "search"])
def test_es_keeps_what_its_guard_decides(tmp_path, monkeypatch, kept):
    """With the guard on, the run keeps θ_0 (no iteration, a zero ES update) when the guard says so, else every
    iteration: whichever way the guard goes, the result and the ES row follow it."""
    from hyper_es.es.delta import es_delta
    from hyper_es.search import es_run

    real = es_run.guard_decision
    monkeypatch.setattr(es_run, "guard_decision", lambda start, final, **kw: {**real(start, final, **kw),
                                                                             "kept": kept})
    recipe = _recipe(tmp_path, iterations=1)
    recipe.fitness.reward = "dense_reward:length_fraction"  # a fitness that varies, so the iteration moves θ
    assert recipe.fitness.guard
    result = es_search(recipe, tmp_path / "run", *_engine(recipe))
    assert result["guard"]["kept"] == kept and result["kept_iterations"] == (1 if kept == "search" else 0)
    (tmp_path / "run" / "es" / "config.json").write_text(json.dumps({"es": recipe.es.model_dump(mode="json")}))
    delta, _ = es_delta(tmp_path / "run", models.resolve(recipe.model.name))
    moved = sum(float(d.abs().sum()) for d in delta.values())
    assert (moved > 0) == (kept == "search")


def test_population_diversity_counts_distinct_answers_and_any_member_solves():
    from hyper_es.search.es_run import diversity
    from hyper_es.fitness import Score

    scores = [Score(0.5, per_row=[1.0, 0.0], answers=["3", None]), Score(0.0, per_row=[0.0, 0.0], answers=["4", None]),
              Score(0.5, per_row=[1.0, 0.0], answers=["3", "7"])]
    d = diversity(scores)
    assert d == {"distinct": 2.0, "solved_any": 0.5, "solved_mean": pytest.approx(2 / 6)}


def test_es_token_budget_stops_and_resume_keeps_it(tmp_path):
    """es.max_tokens: ES stops after the iteration whose fitness tokens reach the budget; a re-run adds nothing."""
    recipe = _recipe(tmp_path, iterations=5, max_tokens=1)
    engine, tok = _engine(recipe)
    first = es_search(recipe, tmp_path / "a", engine, tok)
    hist = (tmp_path / "a" / "es" / HISTORY).read_text().splitlines()
    spent = first["cost"]["phases"]["iterations"]["search_tokens"]
    assert first["iterations"] == len(hist) == 1 and spent == first["cost"]["total"]["search_tokens"] == \
        json.loads(hist[0])["tokens"] > 0
    assert first["kept_iterations"] in (0, 1)
    stamp = (tmp_path / "a" / "es" / "result.json").stat().st_mtime_ns
    again = es_search(recipe, tmp_path / "a", *_engine(recipe))
    assert again == first and (tmp_path / "a" / "es" / HISTORY).read_text().splitlines() == hist
    assert (tmp_path / "a" / "es" / "result.json").stat().st_mtime_ns == stamp  # finished: not re-scored


LORA = dict(r=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"))  # q without k: a partly written fused qkv


def test_lora_scope_member_update_and_replay(tmp_path):
    """es.scope lora: θ₀ installs the base exactly (B = 0); a member installs W₀ + s·B'A' with the factors' own
    noise; an update moves the factors, and es_delta's replay from the history gives the engine's W − W₀."""
    from hyper_es.es.delta import es_delta
    from hyper_es.es.lora import LoraShape, init_factors, lora_delta

    shape = LoraShape(**LORA)
    model, tok = models.load(ROOT_TINY, dtype="float32")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    names = es_tensors(shapes, "lora", r"\.layers\.(\d+)\.", shape)
    assert names and all(n.split(".")[-2] in LORA["targets"] for n in names)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    engine = HFResident(model, tok, ESSource(names, lora=shape))
    assert all(torch.equal(engine.params[n], base[n]) for n in names)
    w = names[0]
    a, b = engine.source.theta[f"{w}:A"], engine.source.theta[f"{w}:B"]
    engine.set_genome(Member(7, 0.1))
    want = base[w] + shape.scaling * ((b + 0.1 * noise(7, f"{w}:B", b.shape, kind="table"))
                                      @ (a + 0.1 * noise(7, f"{w}:A", a.shape, kind="table")))
    torch.testing.assert_close(engine.params[w], want, rtol=0, atol=1e-6)
    engine.restore()
    assert all(torch.equal(engine.params[n], base[n]) for n in names)
    engine.update([7, 9], [1.0, -1.0], 0.1, 0.05, [1, 1])
    factors = init_factors({n: shapes[n] for n in names}, shape.r)
    from hyper_es.es.update import apply_update

    apply_update(factors, [7, 9], [1.0, -1.0], 0.1, 0.05, [1, 1], kind="table")
    assert all(torch.equal(engine.source.theta[k], v) for k, v in factors.items()) and engine.source.theta[f"{w}:B"].abs().sum() > 0
    es = tmp_path / "run" / "es"
    es.mkdir(parents=True)
    (es / "config.json").write_text(json.dumps({"es": {"population": 2, "scope": "lora", "noise": "table"}, "lora": {**LORA}}))
    (es / "result.json").write_text(json.dumps({"kept_iterations": 1}))
    (es / HISTORY).write_text(json.dumps({"iteration": 0, "seeds": [7, 9], "signs": [1, 1], "rewards": [1, 0],
                                          "z": [1.0, -1.0], "sigma": 0.1, "alpha": 0.05}) + "\n")
    delta, _ = es_delta(tmp_path / "run", models.resolve(ROOT_TINY))
    assert set(delta) == set(names)
    for n, d in delta.items():
        torch.testing.assert_close(d, engine.weights()[n] - base[n], rtol=0, atol=1e-6)
        torch.testing.assert_close(d, lora_delta(factors, shape.scaling)[n], rtol=0, atol=0)


@pytest.mark.integration
@pytest.mark.vllm
@pytest.mark.parametrize("scope", ["all_linear", "full", "lora"])
def test_vllm_es_member_equals_a_fresh_engine_and_restore_is_exact(tiny_path, tiny_engine, tmp_path, scope):
    """A member installed in the resident vLLM engine generates exactly what a fresh engine loaded with θ + σε
    (written by the HF engine, same noise by name; for lora, W₀ + s·B'A' of the same factors) generates; setting θ
    back gives the base's generations again."""
    from transformers import AutoModelForCausalLM

    from hyper_es.engine import Sampling
    from hyper_es.engine.sources import ESWeights
    from hyper_es.tasks import get_task

    engine, tok = tiny_engine
    task = get_task("countdown")
    prompts = task.prompt_ids(tok, task.rows("test")[:12])
    s = Sampling(max_tokens=16)
    from hyper_es.es.lora import LoraShape

    lora = LoraShape(**LORA) if scope == "lora" else None
    base_out = engine.generate(prompts, s)
    engine.load(ESWeights(Path(tiny_path), "llama", scope, lora))
    engine.set_genome(Member(3, 0.5))
    got = engine.generate(prompts, s)
    engine.restore()
    assert engine.generate(prompts, s) == base_out
    engine.update([3], [1.0], 0.5, 0.25, [1])  # θ ← θ + α/(Nσ)·ε(3) = θ + 0.5·ε(3): the member, as the new θ
    assert engine.generate(prompts, s) == got
    names = engine.names
    engine.unload()  # the checkpoint again, though ES updated θ (the master copy) in place
    assert engine.generate(prompts, s) == base_out
    if scope == "all_linear":  # sequencing: a source whose θ_0 is base + that same update (es.start)
        from safetensors.torch import save_file

        shapes = {n: tuple(p.shape) for n, p in AutoModelForCausalLM.from_pretrained(tiny_path).named_parameters()}
        save_file({n: 0.5 * noise(3, n, shapes[n], kind="table") for n in names},
                  str(tmp_path / "start.safetensors"))
        engine.load(ESWeights(Path(tiny_path), "llama", scope, start_file=tmp_path / "start.safetensors"))
        assert engine.generate(prompts, s) == got
    model, _ = models.load(str(tiny_path), dtype="float32")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    hf = HFResident(model, tok, ESSource(es_tensors(shapes, scope, r"\.layers\.(\d+)\.", lora), lora=lora))
    hf.set_genome(Member(3, 0.5))
    assert hf.generate(prompts, s) == got != base_out  # the same member on HF (fp32 greedy: HF and vLLM agree)
    if scope == "full":  # the whole checkpoint, tied head included: a fresh engine loaded with θ + σε
        assert _fresh_vllm_generates(model, tok, tmp_path / "m", prompts, s) == got


def _fresh_vllm_generates(model, tok, folder, prompts, sampling):
    """What a fresh vLLM engine loaded with `model`'s weights (saved to `folder`) generates."""
    from hyper_es.engine import make_generator

    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    fresh, _ = make_generator("vllm", str(folder), dtype="float32", max_model_len=512)
    try:
        return fresh.generate(prompts, sampling)
    finally:
        fresh.close()


def test_es_cli_sigkill_and_resume_ends_identical(tmp_path, cli):
    """`hyper-es es` killed (SIGKILL) after its second iteration, then re-run: the same history as a run that was
    never interrupted (in this process); a changed ES setting on that folder is refused with one line."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    recipe = _recipe(tmp_path, iterations=4)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe.model_dump(mode="json")))
    cli_args = [sys.executable, "-m", "hyper_es", "es", str(tmp_path / "r.yaml"), "--backend", "hf", "--out"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    assert cli(*cli_args[3:], tmp_path / "a").exit_code == 0
    proc = subprocess.Popen(cli_args + [str(tmp_path / "b")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    hist = tmp_path / "b" / "es" / HISTORY
    deadline = time.time() + 300
    while time.time() < deadline and not (hist.is_file() and len(hist.read_text().splitlines()) >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 2 <= len(hist.read_text().splitlines()) < 4
    subprocess.run(cli_args + [str(tmp_path / "b")], check=True, env=env, capture_output=True)
    assert hist.read_text() == (tmp_path / "a" / "es" / HISTORY).read_text()
    data = recipe.model_dump(mode="json")
    data["es"]["sigma"] = 0.5
    (tmp_path / "r2.yaml").write_text(yaml.safe_dump(data))
    bad = cli("es", tmp_path / "r2.yaml", "--backend", "hf", "--out", tmp_path / "b")
    assert bad.exit_code == 2 and bad.stderr.count("error:") == 1 and "es differ" in bad.stderr


def test_es_row_in_the_final_evaluation_is_the_es_weights(tmp_path):
    """A run folder with RUN/es gets an `es` row: its update, rebuilt from the history alone, is θ_T − θ_0 of the
    engine that ran ES (to fp32 rounding), and the row is scored and reported like the others."""
    from hyper_es.es.delta import es_delta
    from hyper_es.evaluate.final import evaluate_run
    from hyper_es.report import run_report

    recipe = _finished_run(tmp_path, limit=8, reward="dense_reward:length_fraction", population=4, iterations=2,
                           scope="all_linear")
    engine, tok = _engine(recipe)
    theta0 = {n: w.clone() for n, w in engine.weights().items()}
    result = es_search(recipe, tmp_path / "run", engine, tok)
    (tmp_path / "run" / "es" / "config.json").write_text(json.dumps({"es": recipe.es.model_dump(mode="json")}))
    delta, _ = es_delta(tmp_path / "run", models.resolve(recipe.model.name))
    assert set(delta) == set(theta0)
    kept = result["kept_iterations"]
    assert kept == 2 and sum(float(d.abs().sum()) for d in delta.values()) > 0  # the checks below are not 0 == 0
    for n, d in delta.items():
        want = engine.weights()[n] - theta0[n] if kept else torch.zeros_like(d)
        torch.testing.assert_close(d, want, rtol=0, atol=1e-6)
    rows = evaluate_run(recipe, tmp_path / "run", backend="hf")
    es = next(r for r in rows if r["name"] == "es")
    assert es["kind"] == "es" and len(es["results"]["chain_sum"]["records"]["greedy"]) == 8
    report = run_report(recipe, tmp_path / "run", rows)
    row = next(r for r in report["rows"] if r["name"] == "es")
    cost = result["cost"]["total"]
    assert row["optimizer_steps"] == 0 and row["search_tokens"] == cost["search_tokens"] > 0
    start, final = (json.loads((tmp_path / "run" / "es" / f).read_text()) for f in ("start.json", "final.json"))
    assert row["select_tokens"] == cost["select_tokens"] == start["tokens"] + final["tokens"] > 0  # the guard's
    assert row["wall_s"] >= cost["seconds"] > 0
    assert "es" in report["paired"]["vs"]["baseline"]
    # `hyper-es export RUN --row es` serves exactly the evaluated weights: base + the replayed update
    from transformers import AutoModelForCausalLM
    from typer.testing import CliRunner

    from hyper_es.cli import app

    out = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--format", "hf", "--out", str(tmp_path / "es-hf"),
                                   "--row", "es"])
    assert out.exit_code == 0, out.output
    got = AutoModelForCausalLM.from_pretrained(tmp_path / "es-hf").state_dict()
    base = AutoModelForCausalLM.from_pretrained(models.resolve(recipe.model.name)).state_dict()
    for n, d in delta.items():
        torch.testing.assert_close(got[n], base[n] + d, rtol=0, atol=1e-6)
    bad = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--format", "hf", "--out", str(tmp_path / "x"),
                                   "--row", "nope"])
    assert bad.exit_code == 2 and "no adapter for row 'nope'" in bad.output
    from hyper_es.analyze.coverage import analyze_coverage

    cov = analyze_coverage([tmp_path / "run"], tmp_path / "cov")
    assert len(cov["es_diversity"]["run"]) == 2 and (tmp_path / "cov" / "es_diversity.png").stat().st_size > 0


def test_grpo_then_es_starts_from_the_baseline(tmp_path):
    """es.start: baseline (GRPO→ES): θ_0 is base + the baseline's update; the `baseline+es` row's update is that
    plus ES's, and it is charged the baseline's steps."""
    from hyper_es.search.es_run import run_es
    from hyper_es.evaluate.final import evaluate_run
    from hyper_es.report import run_report
    from hyper_es.rows import row_update

    recipe = _finished_run(tmp_path, limit=4, population=2, iterations=1, start="baseline")
    base = {n: p.detach().clone() for n, p in models.load(recipe.model.name, dtype="float32")[0].named_parameters()}
    result = run_es(recipe, tmp_path / "run", backend="hf")
    start = row_update(tmp_path / "run", "baseline", recipe)
    from hyper_es.engine import es_engine

    engine, _ = es_engine(recipe, "hf", tmp_path / "run" / "es" / "start.safetensors")
    for n, d in start.items():
        torch.testing.assert_close(engine.weights()[n].cpu(), base[n] + d, rtol=0, atol=1e-6)  # a GPU engine: cuda
    rows = evaluate_run(recipe, tmp_path / "run", backend="hf")
    report = run_report(recipe, tmp_path / "run", rows)
    row = next(r for r in report["rows"] if r["kind"] == "es")
    baseline = next(r for r in report["rows"] if r["name"] == "baseline")
    assert row["name"] == "baseline+es" and row["optimizer_steps"] == baseline["optimizer_steps"]
    assert row["search_tokens"] == result["cost"]["total"]["search_tokens"] > 0


def test_method_es_run_then_grpo(tmp_path):
    """`method: es` in `hyper-es run`: the baseline, ES from it (GRPO→ES), then GRPO-LoRA on ES's weights (es.then:
    grpo); rows base, baseline, baseline+es, baseline+es+grpo, with steps and tokens of each stage, no search."""
    from hyper_es.directions.train import add_update
    from hyper_es.es.delta import es_delta
    from hyper_es.es.history import GRPO_JOB as JOB, grpo_folder
    from hyper_es.pipeline import run
    from hyper_es.rows import row_update

    recipe = tiny_recipe(tmp_path, {
        "gradient": {"steps": 1, "directions": 2, "baseline_snapshot_every": 0},
        "tasks.0.reward": "dense_reward:digit_fraction",  # a random model scores 0 on `numeric`: no gradient
        "fitness": {"minibatch": 4, "val_size": 4, "guard": False}, "eval.limit": 4, "method": "es",
        "es": {"population": 2, "iterations": 1, "sigma": 0.05, "alpha": 0.02, "then": "grpo", "start": "baseline"}})
    report = run(recipe, tmp_path / "run", backend="hf")
    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows) == ["base", "baseline", "baseline+es", "baseline+es+grpo"]
    assert not (tmp_path / "run" / "search").exists()
    job = json.loads((grpo_folder(tmp_path / "run") / "manifest.json").read_text())
    es = json.loads((tmp_path / "run" / "es" / "result.json").read_text())
    delta, _ = es_delta(tmp_path / "run", models.resolve(recipe.model.name))
    norm = sum(float(d.pow(2).sum()) for d in delta.values()) ** 0.5
    assert es["kept_iterations"] == 1 and job["name"] == JOB and job["start"] == {"from": "es", "norm": pytest.approx(norm)}
    assert norm > 0  # ES's kept weights include its start, the baseline's update
    g, b = rows["baseline+es+grpo"], rows["baseline"]
    assert g["optimizer_steps"] == job["optimizer_steps"] + b["optimizer_steps"] == 2 * b["optimizer_steps"]
    assert g["train_tokens"] == job["tokens"] + b["train_tokens"]
    assert g["search_tokens"] == es["cost"]["total"]["search_tokens"] > 0
    assert "baseline+es+grpo" in report["paired"]["vs"]["baseline"]
    # the row's update is ES's (its start included) plus the new adapter's B·A
    from hyper_es.directions import DirectionSet

    both = row_update(tmp_path / "run", "baseline+es+grpo", recipe)
    lora = DirectionSet.from_adapters(recipe.model.name, [grpo_folder(tmp_path / "run")])
    for t in lora[0].parts:
        torch.testing.assert_close(both[t], delta[t] + lora.delta(0, t), rtol=0, atol=1e-6)
    # add_update: the job's model is the base plus the update
    model, _ = models.load(recipe.model.name, dtype="float32")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    add_update(model, delta)
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n], before[n] + d) for n, d in delta.items())
    with pytest.raises(hx.errors.HyperESError, match="no parameter"):
        add_update(model, {"nope.weight": torch.zeros(1)})


def test_method_es_refuses_a_hyper_es_start(tmp_path):
    with pytest.raises(hx.errors.RecipeError, match="es.start"):
        tiny_recipe(tmp_path, {"es.start": "hyper-es", "method": "es"})
