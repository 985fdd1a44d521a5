"""A pool of resident engines as Ray actors (`executor.kind: ray`, `executor.engines` of them).

Each actor builds its own resident engine once (the search's with the prepared deltas, or ES's with θ's master,
by the `build` function the stage gives) and a Scorer over the searched tasks. The driver sends only genomes
(coefficient vectors, or ES members as seeds) and rows; a generation's candidates are spread over the idle actors
(LoRA candidates: each actor's share in one call, which its engine serves in one generate call) and the Scores come
back in candidate order, so pycma or the ES update sees what one engine would have produced. Calls that change an
engine's state (an ES update) go to every actor and are logged, so an actor that dies is replaced by a new one
that replays the log; its candidates are queued again and the generation's result is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from pathlib import Path

logger = logging.getLogger(__name__)
SEARCH_REWARD = "fitness.reward"


def resident_scorer(recipe, build, kwargs: dict):
    """(engine, Scorer over the searched tasks) as one actor of a pool holds them: `build(recipe, **kwargs)` makes
    the engine (engine.run_engine for the search, engine.es_engine for ES)."""
    from hyper_es.fitness import Scorer, fitness_splits

    engine, tok = build(recipe, **kwargs)
    return engine, Scorer(engine, tok, fitness_splits(recipe)[0])


class EngineActor:
    """One resident engine and its Scorer, inside a Ray actor."""

    def __init__(self, data: dict, path: str, build, kwargs: dict):
        from hyper_es.recipe import recipe_from_dict

        recipe = recipe_from_dict(data, path)
        self.engine, self.scorer = resident_scorer(recipe, build, kwargs)
        self.prompts = None  # the recipe's prompt genes, to render a co-evolved candidate's prompt here
        if recipe.coevolve:
            from hyper_es.tasks.prompt_genome import task_prompts

            self.prompts = task_prompts(recipe, self.scorer.tasks)
        self.search_reward = None
        if recipe.fitness.reward:
            from hyper_es import rewards

            self.search_reward = rewards.get(recipe.fitness.reward)

    def score_many(self, xs: list, rows: dict, kw: dict, prompts: list):
        """(Scores of `xs`, seconds): Scorer.score_many, so LoRA candidates share one engine call."""
        if kw.get("reward") == SEARCH_REWARD:  # a callable does not travel; the actor resolves it from the recipe
            kw = {**kw, "reward": self.search_reward}
        if any(p is not None for p in prompts):  # a co-evolved candidate's prompt travels as its genes
            kw = {**kw, "tasks": [None if p is None else self.prompts.tasks_for(
                self.prompts.from_json(p, "a pooled candidate")) for p in prompts]}
        t0 = time.perf_counter()
        return self.scorer.score_many(xs, rows, **kw), time.perf_counter() - t0

    def candidates(self) -> str:
        return getattr(self.engine, "candidates", "inplace")

    def prepare(self, splits: list) -> None:
        self.scorer.prepare(*splits)

    def call(self, method: str, args: tuple) -> None:
        getattr(self.engine, method)(*args)

    def close(self) -> None:
        self.engine.close()


def prompt_genes(tasks: list | None) -> dict | None:
    """A candidate's tasks as prompted, as plain data: each prompt genome view's genes by task (None: the tasks'
    own prompts)."""
    genes = {t.name: t.prompt_key.to_json() for t in tasks or [] if getattr(t, "prompt_key", None) is not None}
    return genes or None


def engine_pool(stack: contextlib.ExitStack, recipe, build, **kwargs) -> "EnginePool":
    """Join or start Ray for this stage (`executor`) and build a pool of engines made by `build(recipe, **kwargs)`
    (a module-level function: it travels to the actors by reference); `stack` closes the pool, then leaves the
    cluster."""
    from hyper_es.distributed.cluster import ray_cluster, require_gpus

    if kwargs.get("backend") == "vllm":  # each vLLM engine takes most of the GPU it sees
        require_gpus("executor.engine.num_gpus", recipe.executor.engine.num_gpus, "vLLM engine actor")
    stack.enter_context(ray_cluster(recipe.executor, recipe.threads))
    pool = EnginePool(recipe, build, **kwargs)
    stack.callback(pool.close)
    return pool


class EnginePool:
    """Scorer-like (`score`, `score_many`, `prepare`) and engine-like (`update`, `restore`, `close`)."""

    def __init__(self, recipe, build, **kwargs):
        import ray

        from hyper_es.distributed.cluster import worker_env

        ex = recipe.executor
        self.ray = ray
        self._cls = ray.remote(num_cpus=ex.engine.num_cpus, num_gpus=ex.engine.num_gpus,
                               runtime_env=worker_env(recipe.threads))(EngineActor)
        self._args = (recipe.model_dump(mode="json"), str(recipe._path or "<recipe>"), build)
        self._kwargs = kwargs
        self._log: list[tuple[str, tuple]] = []  # state-changing calls, replayed on a replacement
        self.replacements = 0
        self.actors = [self._new(k) for k in range(ex.engines)]
        # LoRA candidates: each actor gets its share of a generation in one call (one engine call for all of them)
        self.lora = ray.get(self.actors[0].candidates.remote()) == "lora"
        self.stats = [{"actor": k, "candidates": 0, "seconds": 0.0} for k in range(ex.engines)]
        self.completed = 0

    def _new(self, k: int):
        kwargs = dict(self._kwargs)
        if "workdir" in kwargs:
            kwargs["workdir"] = str(Path(kwargs["workdir"]) / f"actor-{k}")
        actor = self._cls.remote(*self._args, kwargs)
        self.ray.get([actor.call.remote(m, a) for m, a in self._log] or [actor.prepare.remote([])])
        return actor

    def _replace(self, k: int, exc: Exception) -> None:
        self.replacements += 1
        logger.warning("engine actor %d died (%s); replacing it (replaying %d state calls) and re-queueing its "
                       "candidate", k, type(exc).__name__, len(self._log))
        self.actors[k] = self._new(k)

    def score_many(self, xs: list, rows: dict, *, on_done=None, tasks: list | None = None, **kw) -> list:
        """Scores of `xs` on `rows`, in order, spread over the idle actors; a dead actor's candidate runs again.
        `tasks`: each candidate's tasks as prompted (Scorer.score_many); they travel as their prompt genes."""
        from ray.exceptions import RayActorError

        if kw.get("reward") is not None:  # the search's reward (fitness.reward), resolved in each actor
            kw = {**kw, "reward": SEARCH_REWARD}
        prompts = [prompt_genes(ts) for ts in tasks] if tasks else [None] * len(xs)
        results: list = [None] * len(xs)
        queue, inflight, busy = deque(self.chunks(len(xs))), {}, set()
        while queue or inflight:
            for k, actor in enumerate(self.actors):
                if queue and k not in busy:
                    chunk = queue.popleft()
                    ref = actor.score_many.remote([xs[i] for i in chunk], rows, kw, [prompts[i] for i in chunk])
                    inflight[ref] = (chunk, k)
                    busy.add(k)
            ready, _ = self.ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                chunk, k = inflight.pop(ref)
                busy.discard(k)
                try:
                    scores, seconds = self.ray.get(ref)
                except RayActorError as exc:
                    queue.appendleft(chunk)
                    self._replace(k, exc)
                    continue
                self.stats[k]["candidates"] += len(chunk)
                self.stats[k]["seconds"] += seconds
                for i, score in zip(chunk, scores, strict=True):
                    results[i] = score
                    self.completed += 1
                    if on_done:
                        on_done()
        return results

    def chunks(self, n: int) -> list[list[int]]:
        """Candidates 0..n-1 in the pieces one actor call takes: one by one (the idle actor takes the next), or, for
        LoRA candidates, each actor's share in one piece."""
        size = -(-n // len(self.actors)) if self.lora and n else 1
        return [list(range(i, min(i + size, n))) for i in range(0, n, size)]

    def score(self, x, rows: dict, *, tasks: list | None = None, **kw):
        return self.score_many([x], rows, tasks=None if tasks is None else [tasks], **kw)[0]

    def _broadcast(self, method: str, *args) -> None:
        from ray.exceptions import RayActorError

        self._log.append((method, args))
        refs = [actor.call.remote(method, args) for actor in self.actors]
        for k, ref in enumerate(refs):
            try:
                self.ray.get(ref)
            except RayActorError as exc:
                self._replace(k, exc)  # the new actor replays the log, this call included

    def prepare(self, *splits) -> None:
        self.ray.get([a.prepare.remote(list(splits)) for a in self.actors])

    def update(self, *args) -> None:
        self._broadcast("update", *args)

    def restore(self) -> None:
        self.ray.get([a.call.remote("restore", ()) for a in self.actors])

    def throughput(self) -> list[dict]:
        """Per actor: candidates scored and their seconds, and candidates per second."""
        return [{**s, "per_s": s["candidates"] / s["seconds"] if s["seconds"] else 0.0} for s in self.stats]

    def close(self) -> None:
        """Close and kill every actor (a second call does nothing)."""
        actors, self.actors = self.actors, []
        for actor in actors:
            try:
                self.ray.get(actor.close.remote())
            except Exception:  # noqa: BLE001 - a dead actor has nothing left to close
                pass
            self.ray.kill(actor)
