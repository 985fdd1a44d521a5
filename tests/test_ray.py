"""Scale-out on a real local Ray cluster (2 CPU workers), tiny model: the same results as one machine."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hyper_es as hx
from hyper_es.directions.collect import collect

from recipes import VAL, tiny_recipe  # noqa: E402  (tests/helpers is on sys.path: conftest)
from test_directions import HELPERS, adapters, write_recipe  # noqa: E402  (tests/ is on sys.path under pytest)

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.integration
GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="WARNING")  # a declared GPU: no CUDA
    yield ray
    ray.shutdown()


def test_a_task_on_half_a_gpu_plans_for_half_of_it(cluster):
    """gpu_share, which sizes the memory plan of an engine actor or a gradient job: the fraction of the GPU Ray gave
    the task (it sees the whole card), else 1."""
    from hyper_es.distributed.cluster import gpu_share

    share = ray.remote(gpu_share)
    assert ray.get([share.options(num_gpus=0.5, num_cpus=0).remote(), share.options(num_gpus=0).remote()]) == [0.5, 1.0]
    assert gpu_share() == 1.0  # the driver


def test_collect_on_ray_gives_the_local_adapters_bitwise(cluster, tmp_path):
    """K=2 gradient jobs as Ray tasks write the same adapter bytes as the local executor; a re-run skips them."""
    (tmp_path / "a").mkdir()
    local = hx.load_recipe(write_recipe(tmp_path / "a", directions=2, steps=2))
    on_ray = hx.recipe.recipe_from_dict({**local.model_dump(mode="json"), "executor": {"kind": "ray"}},
                                        tmp_path / "b" / "recipe.yaml")
    collect(local, tmp_path / "a" / "run")
    collect(on_ray, tmp_path / "b" / "run")
    assert adapters(tmp_path / "b" / "run") == adapters(tmp_path / "a" / "run") and len(adapters(tmp_path / "a" / "run")) == 2
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "b" / "run").glob("directions/*/manifest.json")}
    collect(on_ray, tmp_path / "b" / "run")
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def _ray_pids(title: bytes) -> list[int]:
    """PIDs of the Ray worker processes whose title starts with `title` (Ray names a worker after its task or
    actor: ray::_train, ray::EngineActor)."""
    pids = []
    for proc in os.listdir("/proc"):
        try:
            with open(f"/proc/{proc}/cmdline", "rb") as f:
                if f.read().split(b"\0")[0].startswith(title):
                    pids.append(int(proc))
        except (OSError, ValueError):
            continue
    return pids


def _ray_train_pids() -> list[int]:
    """PIDs of Ray workers running a gradient job (ray::_train)."""
    return _ray_pids(b"ray::_train")


def test_a_ray_job_whose_worker_is_sigkilled_resumes_to_the_local_adapter(cluster, tmp_path):
    """A gradient job on Ray, its worker SIGKILLed after its checkpoint at step 5 (epoch 1 of 4-step epochs): Ray
    retries the task, which resumes from the TRL checkpoint and ends with the uninterrupted local adapter, bitwise."""
    import threading
    import time

    import yaml

    path = write_recipe(tmp_path, directions=1, steps=12, checkpoint_every=5)
    data = yaml.safe_load(path.read_text())
    data["tasks"][0]["train"]["size"] = 8  # 2 prompts a step: 4 steps an epoch
    local = hx.recipe.recipe_from_dict(data, path)
    on_ray = hx.recipe.recipe_from_dict({**data, "executor": {"kind": "ray", "max_retries": 2}}, path)
    run = tmp_path / "ray"
    done: dict = {}
    worker = threading.Thread(target=lambda: done.setdefault("folders", collect(on_ray, run)))
    worker.start()
    checkpoint, killed, t0 = run / "directions" / ".work-dir-0" / "trainer" / "checkpoint-5", [], time.monotonic()
    while worker.is_alive() and not killed and time.monotonic() - t0 < 300:
        if checkpoint.is_dir():
            for pid in _ray_train_pids():
                os.kill(pid, 9)
                killed.append(pid)
        time.sleep(0.02)
    worker.join(timeout=600)
    assert killed, "the job finished before its worker could be killed"
    assert "folders" in done and not worker.is_alive()
    collect(local, tmp_path / "local")
    assert adapters(run) == adapters(tmp_path / "local") and len(adapters(run)) == 1
    manifest = json.loads((run / "directions" / "dir-0" / "manifest.json").read_text())
    assert manifest["optimizer_steps"] == 12


def test_unreachable_address_is_one_clear_line(tmp_path):
    """In a fresh process (no Ray driver yet): `hyper-es collect` with an address nothing listens on fails fast
    with one line naming the field and the address."""
    import yaml

    path = write_recipe(tmp_path, directions=1, steps=1)
    data = yaml.safe_load(path.read_text())
    data["executor"] = {"kind": "ray", "address": "127.0.0.1:9"}
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PYTHONPATH": HELPERS}  # the recipe's user reward
    res = subprocess.run([sys.executable, "-m", "hyper_es", "collect", str(path), "--out", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=120, env=env)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error")]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "executor.address: cannot reach a Ray cluster at 127.0.0.1:9" in lines[0]


def _search_recipe(folder, **executor):
    """The tiny dense recipe, 2 one-step directions, a 3-generation search with a dense fitness reward."""
    return tiny_recipe(folder, {
        "gradient": {"directions": 2, "steps": 1}, "tasks.0.val": VAL, "merge": {"layer_group_size": 2},
        "search": {"popsize": 4, "max_generations": 3, "sigma0": 0.5, "scale_scan": None, "x0": "uniform"},
        "fitness": {"minibatch": 4, "val_size": 8, "rescore_top": 1, "reward": "dense_reward:length_fraction",
                    "fitness_set": "fixed"},
        "es": {"population": 4, "iterations": 3, "sigma": 0.05, "alpha": 0.01},
        **({"executor": {"kind": "ray", **executor}} if executor else {})}, base="dense", write=True)


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _engine_actor_pids() -> list[int]:
    """PIDs of Ray's engine actor processes (Ray names the process after the actor class)."""
    return _ray_pids(b"ray::EngineActor")


def test_es_on_a_2_actor_pool_gives_the_recorded_values_with_an_actor_killed(cluster, tmp_path, caplog):
    """The golden ES run (tests/golden) on a pool of 2 engine actors: the values the code before the refactor
    recorded for one local engine (as tests/test_golden.py compares them), although one actor's process is
    SIGKILLed after the first update: its members are scored again on a new actor that first replays the update,
    and the log says so. (A search's pool gathers Scores in candidate order the same way:
    test_a_pool_scores_each_candidate_with_its_own_prompt.)"""
    import re
    import threading
    import time

    sys.path.insert(0, str(GOLDEN))
    import record

    from hyper_es.search.es_run import run_es
    from hyper_es.rows import row_update

    want = json.loads((GOLDEN / "golden.json").read_text())
    recipe = record.recipe(tmp_path, engines=2)
    shutil.copytree(GOLDEN / "old_run" / "directions", tmp_path / "run" / "directions")
    history, killed, stop = tmp_path / "run/es/history.jsonl", [], threading.Event()

    def kill_after_the_first_update():
        while not stop.is_set() and not killed:
            if history.is_file() and len(history.read_text().splitlines()) == 1 and _engine_actor_pids():
                os.kill(_engine_actor_pids()[0], 9)
                killed.append(True)
            time.sleep(0.02)

    killer = threading.Thread(target=kill_after_the_first_update)
    with caplog.at_level("WARNING"):
        killer.start()
        try:
            run_es(recipe, tmp_path / "run", backend="hf")
        finally:
            stop.set()
            killer.join()
    assert killed, "ES finished before an actor could be killed"
    replays = [int(m.group(1)) for r in caplog.records if (m := re.search(r"replacing it \(replaying (\d+)", r.message))]
    assert replays and replays[0] >= 1, [r.message for r in caplog.records]  # the new actor replayed the update
    got = record.observed_es(recipe, tmp_path / "run", row_update)
    record.check(got, {k: want[k] for k in got})  # so the pool's history is one local engine's
    assert all(len(h["actors"]) == 2 for h in _lines(history))


def test_a_pool_scores_each_candidate_with_its_own_prompt(cluster, tmp_path):
    """Co-evolution on a pool of 2 engine actors: each candidate's prompt travels as its genes and the actor renders
    it, so the Scores equal one local engine's with the same tasks as prompted."""
    import numpy as np

    from hyper_es.engine import run_engine
    from hyper_es.fitness import Scorer, fitness_splits
    from hyper_es.fitness.pool import EnginePool
    from hyper_es.merging import recipe_genome
    from hyper_es.tasks.prompt_genome import Prompt, task_prompts

    recipe = _search_recipe(tmp_path, engines=2)
    name = recipe.tasks[0].name
    data = recipe.model_dump(mode="json")
    data["coevolve"] = {"tasks": {name: {"systems": ["Add the numbers."], "templates": ["Sum: {question}"],
                                         "max_shots": 2}}}
    recipe = hx.recipe.recipe_from_dict(data, tmp_path / "recipe.yaml")
    shutil.copytree(GOLDEN / "old_run" / "directions", tmp_path / "run" / "directions")  # 2 one-step directions
    tasks, fit_pool, _ = fitness_splits(recipe)
    rows = {n: r[:4] for n, r in fit_pool.items()}
    prompts = task_prompts(recipe, tasks)
    genes = [{name: Prompt()}, {name: Prompt(system=1, shots=(2,))}, {name: Prompt(template=1, shots=(0, 3))}]
    per = [prompts.tasks_for(g) for g in genes]
    genome, _ = recipe_genome(recipe, hx.DirectionSet.from_run(tmp_path / "run"))
    xs = [genome.uniform(0.5), genome.uniform(1.0), genome.uniform(0.5)]
    kw = {"reward": hx.rewards.get("dense_reward:length_fraction")}
    args = {"backend": "hf", "run_dir": str(tmp_path / "run"), "seed": 0}
    engine, tok = run_engine(recipe, workdir=str(tmp_path / "local"), **args)
    want = Scorer(engine, tok, tasks).score_many(xs, rows, tasks=per, **kw)
    pool = EnginePool(recipe, run_engine, workdir=str(tmp_path / "pool"), **args)
    try:
        got = pool.score_many(xs, rows, tasks=per, **kw)
        one = pool.score(xs[1], rows, tasks=per[1], **kw)
    finally:
        pool.close()
    assert [(s.reward, s.per_row, s.tokens) for s in got] == [(s.reward, s.per_row, s.tokens) for s in want]
    assert (one.reward, one.per_row) == (want[1].reward, want[1].per_row)
    assert not np.allclose(want[0].per_row, want[2].per_row)  # the same weights, another prompt: other scores
