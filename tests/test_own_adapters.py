"""Your own adapters, end to end: three LoRA adapters made with PEFT alone → a recipe naming them (or one API call)
→ a search killed after its first generation and resumed → exports reloaded in transformers; and every bad input of
that path is one line (exit 2) or one HyperESError."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import hyper_es as hx

TASK = {"name": "chain_sum", "val": {"source": "reasoning_gym", "dataset": "chain_sum", "size": 16, "seed": 500000},
        "test": {"source": "builtin", "name": "chain_sum_test", "limit": 8},
        "prompt": {"template": "{question}\nGive the final answer in \\boxed{{}}."}, "reward": "numeric",
        "max_tokens": 8}
SEARCH = {"popsize": 4, "max_generations": 3, "scale_scan": [0.5, 1.0]}
FITNESS = {"minibatch": 8, "val_size": 8, "reward": "numeric_partial"}
SHAPES = [(2, ["q_proj"]), (4, ["q_proj", "v_proj"]), (2, ["up_proj"])]  # mixed ranks and targets: Σ r = 8


def make_adapters(root: Path, base: str | None = None) -> list[Path]:
    """Three trained-looking LoRA adapters of the tiny model, made with PEFT alone (random A and B)."""
    import peft

    from hyper_es import models

    out = []
    for i, (r, targets) in enumerate(SHAPES):
        torch.manual_seed(i)
        model = peft.get_peft_model(models.load("tiny-random")[0], peft.LoraConfig(
            r=r, lora_alpha=2 * r, target_modules=targets, init_lora_weights=False))
        model.save_pretrained(str(root / f"a{i}"))
        if base:
            cfg = json.loads((root / f"a{i}" / "adapter_config.json").read_text())
            (root / f"a{i}" / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": base}))
        out.append(root / f"a{i}")
    return out


def write_recipe(root: Path, **directions) -> Path:
    recipe = {"name": "own", "model": {"name": "tiny-random", "max_model_len": 512}, "tasks": [TASK],
              "directions": {"adapters": ["adapters/a0", {"path": "adapters/a1", "name": "wide"}, "adapters/a2"],
                             **directions},
              "merge": {"method": "task_arithmetic"}, "search": SEARCH, "eval": {"backend": "hf", "limit": 8}}
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


class Killed(Exception):
    pass


@pytest.fixture
def kill_after_first_generation(monkeypatch):
    """The search dies right after generation 1 is checkpointed (as a kill between generations would leave it)."""
    from hyper_es.search.driver import CMASearch

    tell = CMASearch.tell

    def dying(self, *a, **kw):
        record = tell(self, *a, **kw)
        if self.state.generation == 1:
            raise Killed
        return record

    monkeypatch.setattr(CMASearch, "tell", dying)
    return lambda: monkeypatch.setattr(CMASearch, "tell", tell)


def reloaded_equal(hf_folder: Path, peft_folder: Path, want: dict) -> None:
    """The hf export loads in transformers and holds `want`; the PEFT adapter, merged by PEFT, gives the same."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(hf_folder, dtype=torch.float32).state_dict()
    base = AutoModelForCausalLM.from_pretrained(_base(), dtype=torch.float32)
    lora = PeftModel.from_pretrained(base, str(peft_folder)).merge_and_unload().state_dict()
    for t, w in want.items():
        torch.testing.assert_close(hf[t], w, rtol=0, atol=1e-6)
        torch.testing.assert_close(lora[t], w, rtol=0, atol=1e-5)  # task arithmetic at rank 16 ≥ Σ r = 8: exact


def _base() -> str:
    from hyper_es import models

    return str(models.resolve("tiny-random"))


def merged(ds, genome, x) -> dict:
    from safetensors.torch import load_file

    from hyper_es.merging import MergePlan, MergeSettings

    sd = load_file(str(ds.base_path / "model.safetensors"))
    return MergePlan(ds, genome, MergeSettings(method="task_arithmetic")).apply(sd, x)


def test_a_recipe_naming_peft_adapters_searches_resumes_and_exports(cli, tmp_path, kill_after_first_generation,
                                                                    caplog):
    make_adapters(tmp_path / "adapters")
    recipe, run = write_recipe(tmp_path), tmp_path / "RUN"
    summary = cli("check", recipe)
    assert summary.exit_code == 0 and "directions: 3 given (a0, wide, a2)" in summary.stdout
    assert "genome 12 genes" in summary.stdout and "generated tokens at most" in summary.stdout
    with pytest.raises(Killed):
        from hyper_es.recipe import load_recipe
        from hyper_es.search.run import search

        search(load_recipe(recipe), run, backend="hf")
    assert json.loads((run / "search" / "checkpoint.json").read_text())["generation"] == 1
    kill_after_first_generation()  # the fixture's undo: the re-run lives
    caplog.set_level("INFO")
    res = cli("search", recipe, "--out", run)
    assert res.exit_code == 0, res.output
    assert "resuming search at generation 1" in caplog.text
    result = json.loads((run / "search" / "result.json").read_text())
    assert result["generations"] == 3 and len((run / "search" / "generations.jsonl").read_text().splitlines()) == 3
    # imported with their provenance, not a training manifest; the run folder no longer needs the originals
    src = json.loads((run / "directions" / "wide" / "source.json").read_text())
    assert src["imported"]["kind"] == "peft-adapter" and len(src["imported"]["sha256"]) == 2
    assert not (run / "directions" / "wide" / "manifest.json").exists() and (run / "recipe.yaml").is_file()
    (tmp_path / "adapters").rename(tmp_path / "moved")
    ds = hx.DirectionSet.from_run(run)
    assert ds.names == ["a0", "a2", "wide"] and not ds.zero_directions()
    for fmt in ("hf", "peft"):
        res = cli("export", run, "--format", fmt, "--out", tmp_path / fmt)
        assert res.exit_code == 0, res.output
    assert "0.00% off the merged update" in res.stdout
    genome, x = hx.Genome.from_json(run / "search" / "best.json")
    reloaded_equal(tmp_path / "hf", tmp_path / "peft", merged(ds, genome, x))


def test_the_same_in_one_api_call(tmp_path, kill_after_first_generation, cli):
    folders = make_adapters(tmp_path / "adapters")
    ds = hx.DirectionSet.from_adapters("tiny-random", folders, names=["a0", "wide", "a2"])
    kw = dict(tasks=[TASK], out=tmp_path / "RUN", merge={"method": "task_arithmetic"}, search=SEARCH,
              fitness=FITNESS)
    with pytest.raises(Killed):
        hx.search_merge(ds, **kw)
    kill_after_first_generation()
    res = hx.search_merge(ds, **kw)
    assert res.result["generations"] == 3 and len(res.history) == 3 and set(res.rows) >= {"base", "x0", "hyper-es"}
    assert res.result["guard"]["kept"] in ("x0", "search") and (tmp_path / "RUN" / "search" / "best.json").is_file()
    assert res.x.shape == (res.genome.size,) and res.genome.directions == ("a0", "a2", "wide")
    res.export_hf(tmp_path / "hf")
    errors = res.export_peft(tmp_path / "peft")
    assert errors.whole < 1e-5
    reloaded_equal(tmp_path / "hf", tmp_path / "peft", merged(res.directions, res.genome, res.x))
    again = hx.search_merge(ds, **kw)  # finished: read back, not searched again
    assert np.array_equal(again.x, res.x)
    assert cli("export", tmp_path / "RUN", "--format", "mergekit", "--out", tmp_path / "m.yaml").exit_code == 0


def test_a_run_on_given_adapters_without_a_baseline_reports_against_the_base(cli, tmp_path):
    make_adapters(tmp_path / "adapters")
    recipe = write_recipe(tmp_path)
    res = cli("run", recipe, "--out", tmp_path / "RUN")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "RUN" / "report.json").read_text())
    names = [r["name"] for r in report["rows"]]
    assert {"base", "a0", "wide", "a2", "uniform", "hyper-es"} <= set(names) and "baseline" not in names
    assert all(r["optimizer_steps"] == 0 for r in report["rows"] if r["name"] in ("a0", "wide", "a2"))
    assert "Δ base" in res.stdout and report["baseline_best"] is None


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    """A finished one-generation search over three PEFT adapters, made by the API (a run folder for `export`)."""
    root = tmp_path_factory.mktemp("api_run")
    folders = make_adapters(root / "adapters")
    ds = hx.DirectionSet.from_adapters("tiny-random", folders)
    hx.search_merge(ds, tasks=[TASK], out=root / "RUN", merge={"method": "dare_ties"},
                    search={**SEARCH, "max_generations": 1, "scale_scan": None}, fitness=FITNESS)
    return root


def _cli_case(case: str, root: Path, tmp: Path) -> tuple[list, Path | None]:
    """(hyper-es arguments, a path that must be left as it was or not created)."""
    run, taken = root / "RUN", tmp / "taken"
    if case.startswith("eval"):
        args = ["eval", "--model", "tiny-random", "--task", "chain_sum", "--backend", "hf", "--limit", "1"]
        if case.startswith("eval --adapter of another base's shapes"):
            from tests.test_cli_errors import _adapter

            served = ["--backend", "vllm"] if "vLLM" in case else []  # checked before an engine starts
            return [*args, *served, "--adapter", _adapter(tmp / "wide", widen=True)], None
        if case == "eval --adapter without adapter_config.json":
            (tmp / "bare").mkdir()
            (tmp / "bare" / "adapter_model.safetensors").write_bytes(b"")
            return [*args, "--adapter", tmp / "bare"], None
        taken.mkdir()
        return [*args, "--out", taken], taken
    if case == "a recipe's adapter config names another base":
        make_adapters(tmp / "adapters", base="Qwen/Qwen2.5-0.5B")
        return ["search", write_recipe(tmp), "--out", tmp / "RUN", "--backend", "hf"], tmp / "RUN" / "search"
    if case == "a recipe's adapter changes a module the base lacks":
        from safetensors.torch import load_file, save_file

        a0 = make_adapters(tmp / "adapters")[0]
        weights = load_file(str(a0 / "adapter_model.safetensors"))
        save_file({k.replace("q_proj", "qq_proj"): v for k, v in weights.items()}, str(a0 / "adapter_model.safetensors"))
        cfg = json.loads((a0 / "adapter_config.json").read_text())
        (a0 / "adapter_config.json").write_text(json.dumps({**cfg, "target_modules": ["qq_proj"]}))
        return ["search", write_recipe(tmp), "--out", tmp / "RUN", "--backend", "hf"], tmp / "RUN" / "search"
    if case == "a recipe's adapter config says another rank":
        a0 = make_adapters(tmp / "adapters")[0]
        cfg = json.loads((a0 / "adapter_config.json").read_text())
        (a0 / "adapter_config.json").write_text(json.dumps({**cfg, "r": cfg["r"] * 2}))
        return ["search", write_recipe(tmp), "--out", tmp / "RUN", "--backend", "hf"], tmp / "RUN" / "search"
    if case == "a recipe's adapter is all zero":
        import peft

        from hyper_es import models

        make_adapters(tmp / "adapters")
        peft.get_peft_model(models.load("tiny-random")[0], peft.LoraConfig(r=2, target_modules=["q_proj"])
                            ).save_pretrained(str(tmp / "adapters" / "a2"))  # saved untrained: B = 0
        return ["search", write_recipe(tmp), "--out", tmp / "RUN", "--backend", "hf"], tmp / "RUN" / "search"
    if case.startswith(("collect", "run", "search")):
        taken.write_text("mine")
        make_adapters(tmp / "adapters")
        return [case.split()[0], write_recipe(tmp), "--out", taken], taken
    if case.startswith("export --format"):
        fmt = case.split()[2]
        if fmt == "hf" or case.endswith("FILE"):
            taken.write_text("mine")
            return ["export", run, "--format", fmt, "--out", taken], taken
        return ["export", run, "--format", "peft", "--rank", "1", "--out", tmp / "lossy"], tmp / "lossy"
    if case == "export --genome for other directions":
        genome = tmp / "g.json"
        genome.write_text((root / "RUN" / "search" / "best.json").read_text().replace('"a0"', '"zz"').replace(
            "/a0/", "/zz/"))
        return ["export", run, "--format", "hf", "--genome", genome, "--out", tmp / "out"], tmp / "out"
    assert case == "export --genome of a missing file"
    return ["export", run, "--format", "hf", "--genome", tmp / "nope.json", "--out", tmp / "out"], tmp / "out"


CLI_CASES = ["eval --adapter of another base's shapes", "eval --adapter of another base's shapes, served by vLLM",
             "eval --adapter without adapter_config.json",
             "a recipe's adapter config names another base", "a recipe's adapter changes a module the base lacks",
             "a recipe's adapter config says another rank", "a recipe's adapter is all zero",
             "collect --out FILE", "run --out FILE", "search --out FILE", "export --format hf --out FILE",
             "export --format peft --out FILE", "export --format peft above --max-error", "eval --out FOLDER",
             "export --genome for other directions", "export --genome of a missing file"]


@pytest.mark.parametrize("case", CLI_CASES)
def test_every_bad_input_of_the_path_is_one_line(cli, api_run, tmp_path, case):
    args, untouched = _cli_case(case, api_run, tmp_path)
    before = (untouched.read_text() if untouched.is_file() else sorted(untouched.iterdir())) if (
        untouched and untouched.exists()) else None
    result = cli(*args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.stderr
    if untouched is not None:  # nothing written where nothing should be
        after = (untouched.read_text() if untouched.is_file() else sorted(untouched.iterdir())) if (
            untouched.exists()) else None
        assert after == before, case
    expect = {"a recipe's adapter config names another base": "recipe.yaml: directions.adapters[0]",
              "a recipe's adapter changes a module the base lacks": "qq_proj.weight' is not in the base model",
              "eval --adapter of another base's shapes, served by vLLM": "not an adapter of tiny-random",
              "a recipe's adapter is all zero": "0 in every tensor",
              "a recipe's adapter config says another rank": "adapter_config.json gives it rank",
              "export --format peft above --max-error": "nothing written",
              "export --genome of a missing file": "no such file"}
    assert expect.get(case, "") in errors[0]


def test_every_bad_input_of_the_api_is_one_hyper_es_error(api_run, tmp_path):
    from safetensors.torch import load_file

    ds = hx.DirectionSet.from_run(api_run / "RUN")
    sd = load_file(str(ds.base_path / "model.safetensors"))
    cases = {
        "two global weights for three directions": lambda: hx.merge(sd, ds, [0.5, 0.5]),
        "adapters as one string": lambda: hx.DirectionSet.from_adapters("tiny-random", str(api_run / "adapters" / "a0")),
        "a misspelt reward": lambda: hx.rewards.get("numerc"),
        "search over a list": lambda: hx.search_merge([ds], tasks=["chain_sum"], out=tmp_path / "x"),
        "an unknown task": lambda: hx.search_merge(ds, tasks=["chain_summ"], out=tmp_path / "x"),
        "a search field that does not exist": lambda: hx.search_merge(ds, tasks=[TASK], out=tmp_path / "x",
                                                                      search={"popsiz": 4}),
    }
    for name, call in cases.items():
        with pytest.raises(hx.HyperESError) as err:
            call()
        assert "\n" not in str(err.value).strip(), name
    assert not (tmp_path / "x").exists()
    k = hx.merge(sd, ds, [0.5, 0.25, 0.25])  # K values: one weight per direction
    named = hx.merge(sd, ds, dict(zip(ds.names, [0.5, 0.25, 0.25])))
    assert all(torch.equal(k[t], named[t]) for t in ds.tensor_names())


def test_a_saved_set_in_a_recipe_is_imported_as_it_was_saved(cli, tmp_path):
    """`directions: {set: FOLDER}` (a DirectionSet saved by the API, here with a dense direction beside two LoRA
    ones): `collect` imports it without training, and the run reads the same ΔW back."""
    folders = make_adapters(tmp_path / "adapters")
    lora = hx.DirectionSet.from_adapters("tiny-random", folders[:2])
    t = lora.tensor_names()[0]
    dense = hx.DirectionSet.from_dicts("tiny-random", {"dense": {t: torch.full(lora.base_shapes[t], 1e-3)}})
    hx.DirectionSet("tiny-random", [*lora.directions, *dense.directions]).save(tmp_path / "my_set")
    recipe = write_recipe(tmp_path)
    data = yaml.safe_load(recipe.read_text())
    data["directions"] = {"set": "my_set"}
    recipe.write_text(yaml.safe_dump(data))
    assert "directions: 3 given (a0, a1, dense)" in cli("check", recipe).stdout
    res = cli("collect", recipe, "--out", tmp_path / "RUN")
    assert res.exit_code == 0, res.output
    assert not list((tmp_path / "RUN" / "directions").glob("*/manifest.json"))  # nothing trained
    run = hx.DirectionSet.from_run(tmp_path / "RUN")
    assert run.names == ["a0", "a1", "dense"]
    for k, name in enumerate(run.names):
        want = lora if name != "dense" else dense
        for tensor in want[name].parts:
            assert torch.equal(run.delta(k, tensor), want.delta(name, tensor))
    for name in ("a1", "dense"):
        (tmp_path / "RUN" / "directions" / name / "directions.safetensors").unlink()  # its record kept, not its weights
    assert cli("collect", recipe, "--out", tmp_path / "RUN").exit_code == 0  # imported again, not read as done
    assert hx.DirectionSet.from_run(tmp_path / "RUN").delta(2, t).equal(dense.delta("dense", t))


def test_given_adapters_with_a_baseline_train_only_the_baseline(tmp_path):
    """`directions.baseline: true`: the gradient stage trains the GRPO-LoRA baseline alone, and the rows `hyper-es
    run` evaluates are the given directions, their merges and that baseline."""
    from hyper_es.directions.collect import collect
    from hyper_es.evaluate.final import eval_set, plan_rows
    from hyper_es.recipe import load_recipe

    make_adapters(tmp_path / "adapters")
    path = write_recipe(tmp_path, baseline=True)
    data = yaml.safe_load(path.read_text())
    data["tasks"][0]["train"] = {"source": "reasoning_gym", "dataset": "chain_sum", "size": 16, "seed": 1}
    data["gradient"] = {"steps": 1, "baseline_steps": 1, "batch_size": 4, "num_generations": 2,
                        "max_completion_length": 8, "lora": {"r": 2, "alpha": 4}}
    path.write_text(yaml.safe_dump(data))
    recipe, run = load_recipe(path), tmp_path / "RUN"
    trained = {"optimizer_steps": 5, "tokens": 321, "wall_seconds": 12.5}  # a0 was trained by this toolkit before
    (tmp_path / "adapters" / "a0" / "manifest.json").write_text(json.dumps(
        {"name": "a0", "job": {}, "base": {"name": "tiny-random", "sha256": "x"}, "completions": 40,
         "reward_curve": [], **trained}))
    collect(recipe, run, baseline=recipe.directions.baseline)
    assert sorted(p.parent.name for p in run.glob("directions/*/manifest.json")) == ["baseline"]
    from hyper_es.directions.manifest import read_record

    a0, a2 = read_record(run / "directions" / "a0"), read_record(run / "directions" / "a2")
    assert a0["imported"]["trained"] == trained and a0["tokens"] == 0  # recorded, not charged to this run
    assert "trained" not in a2["imported"]
    _, names, snapshots = eval_set(run, load=False)
    rows = {r.name: r.kind for r in plan_rows(run, names, snapshots)}
    assert rows == {"base": "base", "a0": "direction", "a2": "direction", "wide": "direction", "uniform": "uniform",
                    "baseline": "baseline"}
    from hyper_es.evaluate.final import evaluate_run

    data["fitness"] = {"val_size": 4}
    path.write_text(yaml.safe_dump(data))
    evaluate_run(load_recipe(path), run, backend="hf", test=False)  # an lr grid's validation: the candidates only
    assert sorted(p.stem for p in (run / "eval" / "val").glob("*.json")) == ["base", "baseline"]


def test_a_baseline_started_from_a_given_adapter_trains_on_top_of_it(tmp_path):
    """`gradient.baseline_start`: the baseline's LoRA trains on base + the named adapter's ΔW; its rows are base +
    both updates; its early stop's step 0 is that adapter (not the base); each given adapter is scored on
    validation, and those scorings are the baseline's selection cost."""
    from hyper_es.directions.collect import collect
    from hyper_es.directions.manifest import read_manifest
    from hyper_es.evaluate.final import eval_set, evaluate_run, plan_rows
    from hyper_es.recipe import load_recipe
    from hyper_es.rows import row_update
    from hyper_es.rows.charge import selection_costs

    make_adapters(tmp_path / "adapters")
    path = write_recipe(tmp_path, baseline=True)
    data = yaml.safe_load(path.read_text())
    data["tasks"][0]["train"] = {"source": "reasoning_gym", "dataset": "chain_sum", "size": 16, "seed": 1}
    data["gradient"] = {"steps": 1, "baseline_steps": 1, "batch_size": 4, "num_generations": 2,
                        "max_completion_length": 8, "lora": {"r": 2, "alpha": 4}, "baseline_start": "wide"}
    data["fitness"] = {"val_size": 8}
    path.write_text(yaml.safe_dump(data))
    recipe, run = load_recipe(path), tmp_path / "RUN"
    collect(recipe, run, baseline=True)
    start = read_manifest(run / "directions" / "baseline")["start"]
    wide = hx.DirectionSet.from_adapters("tiny-random", [tmp_path / "adapters" / "a1"], ["wide"])
    norm = sum(float(wide.delta(0, t).pow(2).sum()) for t in wide[0].parts) ** 0.5
    assert start["from"] == "adapter" and start["name"] == "wide" and start["norm"] == pytest.approx(norm, rel=1e-5)
    _, names, snapshots = eval_set(run, load=False)
    rows = {r.name: r for r in plan_rows(run, names, snapshots)}
    assert rows["baseline"].weights == {"wide": 1.0, "baseline": 1.0} and rows["a0"].weights == {"a0": 1.0}
    lora = hx.DirectionSet.from_adapters("tiny-random", [run / "directions" / "baseline"], ["baseline"])
    update = row_update(run, "baseline", recipe)
    for t in set(wide[0].parts) | set(lora[0].parts):
        want = sum(ds.delta(0, t) for ds in (wide, lora) if t in ds[0].parts)
        torch.testing.assert_close(update[t], want, rtol=0, atol=1e-7)
    cands = evaluate_run(recipe, run, backend="hf", test=False)  # validation: the candidates and each adapter
    assert sorted(c["name"] for c in cands) == ["baseline", "wide"]  # its step 0 is the adapter, not the base
    scored = {p.stem: json.loads(p.read_text()) for p in (run / "eval" / "val").glob("*.json")}
    assert set(scored) == {"baseline", "a0", "wide", "a2"}
    assert selection_costs(run, [])["baseline"].select_tokens == sum(v["tokens"] for v in scored.values())


def test_adapter_further_chooses_the_best_adapter_by_validation_once(tmp_path):
    """compare.further: the given adapter best alone on the main run's validation (ties: the first named), kept in
    further.json; the arm's overlay is grpo-equal-compute's with the baseline started from it."""
    from hyper_es.compare.further import choose, further_changes
    from hyper_es.compare.run import plan_for
    from hyper_es.recipe import load_recipe, recipe_from_dict

    make_adapters(tmp_path / "adapters")
    recipe = load_recipe(write_recipe(tmp_path, baseline=True))
    main = tmp_path / "main"
    (main / "eval" / "val").mkdir(parents=True)
    for name, mean in (("a0", 0.25), ("wide", 0.5), ("a2", 0.5)):
        (main / "eval" / "val" / f"{name}.json").write_text(json.dumps({"mean": mean, "tokens": 10}))
    choice = choose(main, tmp_path / "further", recipe)
    assert choice == {"adapter": "wide", "val": {"a0": 0.25, "wide": 0.5, "a2": 0.5}}
    (main / "eval" / "val" / "a2.json").write_text(json.dumps({"mean": 0.9}))
    assert choose(main, tmp_path / "further", recipe) == choice  # made once: a resumed arm trains the same one
    plan = {"steps": 3, "accumulation": 2, "snapshot_every": 1, "micro": 1}
    changes = further_changes(choice, plan)
    assert changes["gradient"]["baseline_start"] == "wide" and changes["gradient"]["accumulation_steps"] == 2
    assert changes["search"]["scale_scan"] is None and changes["eval"]["merges"] == [] and changes["gradfit"] is None
    data = recipe.model_dump(mode="json")
    data["compare"]["further"] = True
    plan = plan_for(recipe_from_dict(data, recipe._path))
    assert plan.rows["adapter-further"] == ("further", None) and "adapter-further" in plan.controls
    pairs = plan.all_pairs()  # a composition: each row minus each other, once
    n = len(plan.rows)
    assert len(pairs) == n * (n - 1) // 2 == len({frozenset(p) for p in pairs})
    assert ("uniform", "adapter-further") in pairs and ("baseline", "base") in pairs


def test_the_adapter_further_arm_trains_the_chosen_adapter_on_and_reports_its_early_stop(tmp_path):
    """compare's further arm after a main run: the best adapter by validation trained on by the baseline job at the
    equal-compute plan, its rows base + adapter + LoRA, and its early stop charged the adapters' validation."""
    from hyper_es.compare.run import arm_recipe, run_further
    from hyper_es.compare.summary import early_stop_cost
    from hyper_es.directions.manifest import read_manifest
    from hyper_es.pipeline import run
    from hyper_es.recipe import load_recipe

    make_adapters(tmp_path / "adapters")
    path = write_recipe(tmp_path, baseline=True)
    data = yaml.safe_load(path.read_text())
    data["tasks"][0]["train"] = {"source": "reasoning_gym", "dataset": "chain_sum", "size": 16, "seed": 1}
    data["gradient"] = {"steps": 1, "baseline_steps": 2, "batch_size": 4, "num_generations": 2,
                        "max_completion_length": 8, "lora": {"r": 2, "alpha": 4}, "baseline_snapshot_every": 1}
    data.update(fitness={"minibatch": 4, "val_size": 8}, search={"popsize": 4, "max_generations": 1},
                compare={"further": True, "equal_max_batches": 4})
    data["eval"]["k"] = [1]
    path.write_text(yaml.safe_dump(data))
    recipe, seed_dir = load_recipe(path), tmp_path / "ROOT" / "seed0"
    run(arm_recipe(recipe, 0, 1e-3), seed_dir / "main", backend="hf")
    run_further(recipe, seed_dir, 0, 1e-3)
    choice = json.loads((seed_dir / "further" / "further.json").read_text())
    job = read_manifest(seed_dir / "further" / "directions" / "baseline")
    plan = json.loads((seed_dir / "equal" / "equal_compute.json").read_text())
    assert job["start"]["name"] == choice["adapter"] and job["grpo"]["accumulation_steps"] == plan["accumulation"]
    report = json.loads((seed_dir / "further" / "report.json").read_text())
    names = {r["name"] for r in report["rows"]}
    assert "hyper-es" not in names and {"base", "baseline", "a0", "wide", "a2"} <= names
    assert set(report["baseline_best"]["candidates"]) == {choice["adapter"], "baseline"}  # step 0: the adapter
    best = next(r for r in report["rows"] if r["name"] == report["baseline_best"]["name"])
    cost = early_stop_cost(seed_dir / "further", best)
    adapters = sum(json.loads((seed_dir / "further" / "eval" / "val" / f"{a}.json").read_text())["tokens"]
                   for a in ("a0", "wide", "a2"))
    assert cost["select_tokens"] >= adapters > 0


def test_compose_gives_the_search_beside_its_controls_and_resumes(tmp_path):
    """hx.compose: the search over your adapters, with each adapter alone, task arithmetic and TIES at one validated
    lambda and the gradient-fitted genome, all on the test split; a second call reads everything back."""
    ds = hx.DirectionSet.from_adapters("tiny-random", make_adapters(tmp_path / "adapters"))
    kw = {"tasks": [TASK], "out": tmp_path / "RUN", "search": {"popsize": 4, "max_generations": 1},
          "fitness": FITNESS, "gradfit": {"max_steps": 1, "max_tokens": 1}, "eval": {"limit": 8, "k": [1]}}
    report = hx.compose(ds, **kw)
    rows = {r["name"]: r for r in report["rows"]}
    assert {"base", "a0", "a1", "a2", "uniform", "merge-task_arithmetic", "merge-ties", "hyper-es", "search-start",
            "grad-fit"} <= set(rows)
    assert all(rows[a]["train_tokens"] == 0 for a in ("a0", "a1", "a2"))  # your adapters cost this run nothing
    assert rows["merge-ties"]["select_tokens"] > 0  # its lambda's scan on validation
    assert hx.compose(ds, **kw) == report
    with pytest.raises(hx.HyperESError, match="compose scores every row"):
        hx.compose(ds, **{**kw, "reward": lambda completion, reference: 0.0})
