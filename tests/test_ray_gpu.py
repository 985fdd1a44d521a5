"""Ray on a GPU node, without a cluster or a GPU: the CUDA probe is injected. A gradient job or a vLLM engine actor
asked for with num_gpus 0 on a CUDA driver is refused in one line before Ray starts (Ray 2.60 would put every one
on GPU 0). A pool of LoRA-candidate engines gets each actor's share of a generation in one call, and the search's
pool engines are built for a generation's adapters, as the local engine is."""

import types

import pytest

from hyper_es.distributed import cluster
from hyper_es.errors import ConfigError
from hyper_es.recipe.search import ExecutorConfig


class RayStarted(Exception):
    """Raised by the stand-in ray_cluster: the code got as far as starting Ray."""


@pytest.fixture
def no_ray(monkeypatch):
    def start(*args, **kwargs):
        raise RayStarted

    monkeypatch.setattr(cluster, "ray_cluster", start)


def _recipe(**executor):
    return types.SimpleNamespace(executor=ExecutorConfig(kind="ray", **executor), threads=1)


def _cuda(monkeypatch, present: bool) -> None:
    monkeypatch.setattr(cluster, "cuda_present", lambda: present)


def test_a_gradient_job_with_no_gpu_on_a_cuda_driver_is_refused_before_ray(monkeypatch, no_ray, tmp_path):
    from hyper_es.directions.ray_jobs import run_jobs_on_ray

    _cuda(monkeypatch, True)
    with pytest.raises(ConfigError) as err:
        run_jobs_on_ray(_recipe(), [], tmp_path, "hash")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("executor.job.num_gpus: 0 on a machine with CUDA GPUs")
    assert "set executor.job.num_gpus to" in msg


@pytest.mark.parametrize("cuda,gpus", [(True, 1.0), (True, 0.5), (False, 0.0)])
def test_a_gradient_job_with_gpus_or_without_cuda_goes_on_to_ray(monkeypatch, no_ray, tmp_path, cuda, gpus):
    from hyper_es.directions.ray_jobs import run_jobs_on_ray

    _cuda(monkeypatch, cuda)
    with pytest.raises(RayStarted):
        run_jobs_on_ray(_recipe(job={"num_gpus": gpus}), [], tmp_path, "hash")


def test_a_vllm_engine_actor_with_no_gpu_on_a_cuda_driver_is_refused_before_ray(monkeypatch, no_ray):
    import contextlib

    from hyper_es.fitness.pool import engine_pool

    _cuda(monkeypatch, True)
    with contextlib.ExitStack() as stack, pytest.raises(ConfigError) as err:
        engine_pool(stack, _recipe(), None, backend="vllm")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("executor.engine.num_gpus: 0 on a machine with CUDA GPUs")
    assert "vLLM engine actor" in msg


@pytest.mark.parametrize("backend,cuda,gpus", [("hf", True, 0.0), ("vllm", True, 1.0), ("vllm", False, 0.0)])
def test_other_engine_actors_go_on_to_ray(monkeypatch, no_ray, backend, cuda, gpus):
    import contextlib

    from hyper_es.fitness.pool import engine_pool

    _cuda(monkeypatch, cuda)
    with contextlib.ExitStack() as stack, pytest.raises(RayStarted):
        engine_pool(stack, _recipe(engine={"num_gpus": gpus}), None, backend=backend)


def test_the_probe_answers_without_cuda():
    assert cluster.cuda_present() is False  # this machine has no GPU (a bool, not an error)


class _Ref:
    def __init__(self, value):
        self.value = value


class _Actor:
    """An engine actor in this process: `score_many.remote` scores at once and records the call."""

    def __init__(self, calls: list):
        self.calls = calls
        self.score_many = types.SimpleNamespace(remote=self._score_many)

    def _score_many(self, xs, rows, kw, prompts):
        self.calls.append((self, list(xs)))
        return _Ref(([f"score-{x}" for x in xs], 0.1 * len(xs)))


def _pool(lora: bool, actors: int, calls: list):
    from hyper_es.fitness.pool import EnginePool

    pool = EnginePool.__new__(EnginePool)  # no Ray: the dispatch alone
    pool.ray = types.SimpleNamespace(wait=lambda refs, num_returns: (refs[:num_returns], refs[num_returns:]),
                                     get=lambda ref: ref.value)
    pool.actors = [_Actor(calls) for _ in range(actors)]
    pool.stats = [{"actor": k, "candidates": 0, "seconds": 0.0} for k in range(actors)]
    pool.lora, pool.completed = lora, 0
    return pool


@pytest.mark.parametrize("lora,n,sizes", [(True, 7, [3, 3, 1]), (True, 2, [1, 1]), (False, 5, [1] * 5)])
def test_a_pool_of_lora_engines_scores_each_actors_share_in_one_call(lora, n, sizes):
    pytest.importorskip("ray")
    calls, done = [], []
    pool = _pool(lora, 3, calls)
    xs = list(range(n))
    assert pool.score_many(xs, {}, on_done=lambda: done.append(1)) == [f"score-{x}" for x in xs]
    assert [len(c) for _, c in calls] == sizes and sorted(x for _, c in calls for x in c) == xs
    assert len(done) == n == pool.completed == sum(s["candidates"] for s in pool.stats)
    if lora:  # one call per actor, each a contiguous share
        assert len({id(a) for a, _ in calls}) == len(calls)


def test_the_searchs_pool_engines_are_built_for_a_generations_adapters(monkeypatch, tmp_path):
    """search() on `executor.kind: ray` hands the pool batch = popsize, which resident_engine turns into max_loras
    (as for the local engine); es_engine builds with es.population itself."""
    import os
    import shutil
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "golden"))
    import record

    from hyper_es.fitness import pool
    from hyper_es.search.run import search

    recipe = record.recipe(tmp_path, engines=2)
    shutil.copytree(os.path.join(os.path.dirname(__file__), "golden", "old_run", "directions"),
                    tmp_path / "run" / "directions")
    seen = {}

    def built(stack, recipe, build, **kwargs):
        seen.update(kwargs)
        raise RayStarted

    monkeypatch.setattr(pool, "engine_pool", built)
    with pytest.raises(RayStarted):
        search(recipe, tmp_path / "run", backend="hf")
    assert seen["batch"] == recipe.search.popsize == 4
