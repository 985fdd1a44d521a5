"""The Scorer: a candidate's mean verified reward on rows of several tasks, with a resident engine.

A candidate is whatever the engine's `set_genome` takes (a coefficient vector, an ES member, or None for the
engine's resting weights); the Scorer never looks inside it. A candidate's prompts of every task go to the engine in
one call (vLLM batches them together). A task with an environment is scored on episodes: each row's reward is its
episode's, its tokens every turn's (environments/episodes.py), and the episodes of every candidate that an engine
with LoRA candidates serves at once share each turn's call."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from hyper_es import rewards
from hyper_es.engine.fidelity import WARN_ABOVE
from hyper_es.environments import play, summary
from hyper_es.rewards.extract import final_answer
from hyper_es.tasks import Task
from hyper_es.tasks.scoring import reward_errors, score_completions

logger = logging.getLogger(__name__)


@dataclass
class Score:
    reward: float
    tokens: int = 0
    timing: dict = field(default_factory=dict)
    reward_errors: int = 0  # reward calls that raised and scored 0
    per_row: list[float] = field(default_factory=list)  # mean reward per problem, in row order (paired comparisons)
    fidelity: float = 0.0  # ‖installed − intended‖ / ‖intended‖ of the update the engine served (engine/fidelity.py)
    answers: list[str | None] = field(default_factory=list)  # first completion's final answer per problem (diversity)
    episodes: dict = field(default_factory=dict)  # environment tasks: task -> counts of its episodes (summary)


class Scorer:
    """Scores genomes with a resident engine (VLLMResident or HFResident) on rows of several tasks.

    A candidate's prompts of every task go to the engine in one call (vLLM batches them together). The reward
    is the task-weighted mean over prompts and samples."""

    def __init__(self, engine, tokenizer, tasks: list[Task]):
        self.engine, self.tok, self.tasks = engine, tokenizer, tasks
        self._ids: dict[tuple[str, str], list[int]] = {}
        self._fidelity_warned = False

    def _prompt_ids(self, task: Task, rows: list[dict]) -> list[list[int]]:
        prompt = getattr(task, "prompt_key", None)  # a prompt genome's task renders its own prompt
        missing = [r for r in rows if (task.name, prompt, r["id"]) not in self._ids]
        max_len = getattr(self.engine, "max_model_len", None)  # over-long prompts are refused (or cut)
        for r, ids in zip(missing, task.prompt_ids(self.tok, missing, max_len) if missing else []):
            self._ids[(task.name, prompt, r["id"])] = ids
        return [self._ids[(task.name, prompt, r["id"])] for r in rows]

    def prepare(self, *splits: dict[str, list[dict]]) -> None:
        """Tokenise (and length-check) every row up front: an over-long prompt fails now, not generations later."""
        for rows in splits:
            for task in self.tasks:
                if rows.get(task.name) and task.environment is None:
                    self._prompt_ids(task, rows[task.name])

    def score(self, x, rows: dict[str, list[dict]], *, samples: int = 1, temperature: float = 0.0,
              seed: int = 0, reward=None, answers: bool = False, tasks: list[Task] | None = None) -> Score:
        """Mean reward of genome x on `rows`; `reward` (a callable) replaces each task's own (fitness.reward). With
        `answers`, each problem's first final answer is kept too (ES's population diversity). `tasks`: the tasks
        as prompted for this candidate (a prompt genome's views of the Scorer's tasks; default: those)."""
        t0, failed = time.perf_counter(), rewards.failures()
        self.engine.set_genome(x)
        fidelity = self._fidelity(getattr(self.engine, "last_fidelity", 0.0))
        t1 = time.perf_counter()
        single, groups = self._groups(rows, samples, temperature, seed, tasks)
        outs = self.engine.generate_groups(groups) if groups else []
        played = self._play([rows], samples, temperature, seed, [tasks],
                            lambda asks: [self.engine.generate_groups(asks[0])])[0]
        t2 = time.perf_counter()
        score = self._tally(single, groups, rows, outs, reward, answers, played)
        score.timing = {"merge_load_s": t1 - t0, "generate_s": t2 - t1, "score_s": time.perf_counter() - t2}
        score.reward_errors, score.fidelity = reward_errors(failed), fidelity
        return score

    def _fidelity(self, value: float) -> float:
        fidelity = float(value)
        if fidelity > WARN_ABOVE and not self._fidelity_warned:
            self._fidelity_warned = True
            logger.warning("the installed update differs from the intended one by %.0f%%: bf16 rounds the merge "
                           "away; set eval.dtype: float32 or serve.candidates: lora (logged once; fidelity_max "
                           "per generation)", 100 * fidelity)
        return fidelity

    def _groups(self, rows, samples: int, temperature: float, seed: int, tasks=None) -> tuple[list[Task], list]:
        """The single-turn tasks with rows, and their prompt groups (environment tasks are played: `_play`)."""
        tasks = [t for t in tasks or self.tasks if rows.get(t.name) and t.environment is None]
        return tasks, [(self._prompt_ids(t, rows[t.name]), t.sampling(n=samples, temperature=temperature, seed=seed))
                       for t in tasks]

    def _play(self, rows: list[dict], samples: int, temperature: float, seed: int, tasks, generate) -> list[dict]:
        """Each player's episodes per environment task ({task: [episode per row × sample]}); players: one per
        entry of `rows`, every turn in one call of `generate` (see environments.play). `tasks`: each player's tasks
        as prompted (a co-evolved system turn opens its episodes, and their tools show its descriptions), or None for
        the Scorer's."""
        played = [{} for _ in rows]
        views = [{t.name: t for t in ts or self.tasks} for ts in tasks]
        for task in [t for t in self.tasks if t.environment is not None and rows[0].get(t.name)]:
            sampling = task.sampling(n=samples, temperature=temperature, seed=seed)
            episodes = play(generate, self.tok, task.environment,
                            [v[task.name].episode_rows(r[task.name]) for v, r in zip(views, rows, strict=True)],
                            task.limits(), sampling=sampling, max_len=getattr(self.engine, "max_model_len", None),
                            schemas=[v[task.name].tool_schemas() for v in views])
            for mine, eps in zip(played, episodes):
                mine[task.name] = eps
        return played

    def _tally(self, tasks, groups, rows, outs, reward, answers: bool, played: dict) -> Score:
        """The task-weighted mean reward, tokens and per-row rewards, in the Scorer's task order."""
        generated = {t.name: (t, sampling, task_outs) for t, (_, sampling), task_outs in zip(tasks, groups, outs)}
        total, weight, tokens, per_row, finals = 0.0, 0.0, 0, [], []
        for own in [t for t in self.tasks if t.name in played or t.name in generated]:
            name = own.name
            if name in played:  # an environment task: each episode's reward, every turn's tokens
                eps, n = played[name], max(1, len(played[name]) // len(rows[name]))
                task, scored = own, [e.reward for e in eps]
                per_row += [float(np.mean(scored[i:i + n])) for i in range(0, len(scored), n)]
                finals += [None] * len(rows[name]) if answers else []
                tokens += sum(e.tokens for e in eps)
            else:
                (task, sampling, task_outs), scored = generated[name], []
                for row, completions in zip(rows[name], task_outs, strict=True):
                    texts, row_scores = score_completions(self.tok, task, row, completions, sampling.stop, reward)
                    scored += row_scores
                    per_row.append(float(np.mean(row_scores)))
                    if answers:
                        finals.append(final_answer(texts[0]) if texts else None)
                    tokens += sum(map(len, completions))
            total += task.cfg.weight * float(np.mean(scored))
            weight += task.cfg.weight
        return Score(total / weight, tokens, per_row=per_row, answers=finals,
                     episodes={name: summary(eps) for name, eps in played.items()})

    def score_many(self, xs: list, rows: dict[str, list[dict]], *, on_done=None, samples: int = 1,
                   temperature: float = 0.0, seed: int = 0, reward=None, answers: bool = False,
                   tasks: list[list[Task]] | None = None) -> list[Score]:
        """Scores of several genomes on the same rows, in order (an engine pool spreads them over its actors);
        `tasks`: each genome's tasks as prompted (see `score`). An engine with LoRA candidates generates for all of
        them in one call; the Scores are the same as one by one."""
        kw = {"samples": samples, "temperature": temperature, "seed": seed, "reward": reward, "answers": answers}
        per = tasks or [None] * len(xs)
        if len(per) != len(xs):
            raise ValueError(f"score_many: {len(xs)} genomes but {len(per)} task lists")
        if getattr(self.engine, "candidates", "inplace") != "lora":
            out = []
            for x, ts in zip(xs, per):
                out.append(self.score(x, rows, **kw, tasks=ts))
                if on_done:
                    on_done()
            return out
        t0 = time.perf_counter()
        made = [self._groups(rows, samples, temperature, seed, ts) for ts in per]
        fidelities: list[float] = []  # each candidate's, from its first call
        outs = [[] for _ in xs]
        if any(groups for _, groups in made):
            outs = self.engine.generate_candidates(xs, [groups for _, groups in made])
            fidelities = list(self.engine.last_fidelities)
        played = self._play([rows] * len(xs), samples, temperature, seed, per, self._turns(xs, fidelities))
        t1 = time.perf_counter()
        scores = []
        for (tasks_x, groups), x_outs, fidelity, x_played in zip(made, outs, fidelities, played, strict=True):
            t2, failed = time.perf_counter(), rewards.failures()
            score = self._tally(tasks_x, groups, rows, x_outs, reward, answers, x_played)
            score.fidelity, score.reward_errors = self._fidelity(fidelity), reward_errors(failed)
            # the batch's time (adapters registered, then one generation call for all), shared evenly
            score.timing = {"merge_load_s": 0.0, "generate_s": (t1 - t0) / len(xs),
                            "score_s": time.perf_counter() - t2}
            scores.append(score)
            if on_done:
                on_done()
        return scores

    def _turns(self, xs: list, fidelities: list[float]):
        """A turn of every candidate's episodes in one call of an engine with LoRA candidates (the candidates
        whose episodes have all ended sit it out); `fidelities` is filled by the first turn if still empty."""
        def generate(asks: list) -> list:
            live = [i for i, a in enumerate(asks) if a]
            outs = self.engine.generate_candidates([xs[i] for i in live], [asks[i] for i in live]) if live else []
            if not fidelities and len(live) == len(xs):
                fidelities.extend(self.engine.last_fidelities)
            got = dict(zip(live, outs, strict=True))
            return [got.get(i, []) for i in range(len(asks))]
        return generate
