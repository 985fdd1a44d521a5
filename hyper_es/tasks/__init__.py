"""A task = data splits + prompt format + reward. `Task` turns a TaskConfig into prompts and scores."""

from __future__ import annotations

import itertools
import json
import logging
import random
import string
from functools import cached_property
from pathlib import Path
from typing import Any

from hyper_es import rewards
from hyper_es.sampling import Sampling
from hyper_es.environments import Limits, load_environment
from hyper_es.environments.episodes import as_messages, described
from hyper_es.errors import DataError
from hyper_es.recipe import ReasoningGymSource, Recipe, TaskConfig
from hyper_es.tasks import prompts
from hyper_es.tasks.builtin import builtin_tasks
from hyper_es.tasks.sources import builtin_names, data_dir, load_rows, source_name

__all__ = ["Task", "get_task", "builtin_tasks", "builtin_names", "data_dir", "load_rows"]
SPLITS = ("train", "val", "test")
logger = logging.getLogger(__name__)
_UNCUT = "_uncut_question"  # the full question of a row whose question `prompt.truncate` cut


class Task:
    def __init__(self, cfg: TaskConfig, base_dir: Path | None = None):
        self.cfg = cfg
        self.name = cfg.name
        self.base_dir = base_dir or Path.cwd()
        self.reward = rewards.get(cfg.reward) if cfg.reward is not None else None
        self.environment = load_environment(cfg.environment.factory) if cfg.environment is not None else None
        self._rows: dict[str, list[dict]] = {}
        self._split_of: dict[int, str] = {}  # id(row) -> split, to name a row's split in messages
        self._cut_logged: set[str] = set()
        self._dropped = 0  # train rows dropped for sharing a question with val/test (unpartitioned splits)
        self.fixed_shots: list[dict] | None = None  # the same examples for every row (a prompt genome's)
        self.tool_texts: dict[str, str] | None = None  # an environment's tool descriptions (a prompt genome's)

    def rows(self, split: str) -> list[dict]:
        """Rows of a split (cached). Generated splits partition the questions (`partition: question`); otherwise
        train rows whose question appears in val/test are dropped."""
        if split not in SPLITS:
            raise DataError(f"unknown split '{split}'; expected one of: {', '.join(SPLITS)}")
        if split not in self._rows:
            src = getattr(self.cfg, split)
            if src is None:
                raise DataError(f"task '{self.name}' has no {split} split")
            rows = load_rows(src, self.base_dir, self.shares().get(split))
            others = [s for s in ("val", "test") if getattr(self.cfg, s) and s not in self.shares()]
            if split == "train" and others and self.environment is None:  # drop train's repeats of the others'
                # questions (episodes are not questions: a small instance space, like guess's, repeats by design)
                held = {r.get("question") for s in others for r in self.rows(s)}
                self._dropped = len(rows) - len(rows := [r for r in rows if r.get("question") not in held])
            self._check(rows, split)
            self._rows[split] = rows
            self._split_of.update((id(r), split) for r in rows)
        return self._rows[split]

    def shares(self) -> dict[str, tuple[float, float]]:
        """Each partitioned split's range of the question hash: its share of the partitioned splits' sizes."""
        sizes = {s: src.size for s in SPLITS if isinstance(src := getattr(self.cfg, s), ReasoningGymSource)
                 and src.partition == "question"}
        edges = list(itertools.accumulate(sizes.values(), initial=0))
        return {s: (edges[i] / edges[-1], edges[i + 1] / edges[-1] if i + 1 < len(sizes) else 1.0)
                for i, s in enumerate(sizes)}

    def split_stats(self) -> dict:
        """Rows and distinct questions per split, and the questions each pair of splits shares."""
        qs = {s: [self._instance(r) for r in self.rows(s)] for s in SPLITS if getattr(self.cfg, s)}
        return {"partition": "question" if self.shares() else "none",
                "splits": {s: {"rows": len(q), "distinct": len(set(q))} for s, q in qs.items()},
                "overlap": {f"{a}&{b}": len(set(qs[a]) & set(qs[b])) for a, b in itertools.combinations(qs, 2)},
                **({"train_dropped": self._dropped} if self._dropped else {})}

    def _instance(self, row: dict) -> str | None:
        """What makes a row a distinct problem: its question, or an episode's prompt and reset fields."""
        if self.environment is not None:
            return json.dumps({k: v for k, v in row.items() if k != "id"}, sort_keys=True, default=str)
        return row.get(_UNCUT, row.get("question"))

    def _place(self, split: str | None) -> str:
        """`task 'name' split (source)`, for messages about a row."""
        src = getattr(self.cfg, split) if split else None
        return f"task '{self.name}'" + (f" {split} ({source_name(src, self.base_dir)})" if src else "")

    def _where(self, row: dict) -> str:
        return f"{self._place(self._split_of.get(id(row)))} row {row.get('id')}"

    def _check(self, rows: list[dict], split: str) -> None:
        if not rows:
            raise DataError(f"{self._place(split)}: the split is empty")
        need = [self.cfg.reference] if isinstance(self.cfg.reference, str) else self.cfg.reference
        need = ["prompt"] if self.environment is not None else need
        bad = [(r, f) for r in rows for f in need if f not in r]
        if bad:
            (row, f), more = bad[0], len({id(r) for r, _ in bad}) - 1
            raise DataError(f"{self._place(split)} row {row.get('id')}{f' (and {more} more rows)' if more else ''}: "
                            f"no field '{f}', needed by {'the episodes' if self.environment else '`reference`'} "
                            f"(columns: {', '.join(row)})")

    @cached_property
    def _shot_pool(self) -> list[dict]:
        return self.rows("train") if self.cfg.prompt.few_shot else []

    def shots(self, row: dict) -> list[dict]:
        """Few-shot examples for `row`: a fixed draw from train, seeded by the row id (or `fixed_shots`), never the
        row itself."""
        k = self.cfg.prompt.few_shot
        if not k:
            return []
        question = row.get(_UNCUT, row.get("question"))  # a cut question still keeps its own row out
        if self.fixed_shots is not None:
            return [r for r in self.fixed_shots if r.get("question") != question]
        pool = [r for r in self._shot_pool if r.get("question") != question]
        return random.Random(f"{self.name}:{row['id']}").sample(pool, min(k, len(pool)))

    def messages(self, row: dict) -> list[dict[str, str]]:
        return prompts.messages(self.cfg.prompt, row, self.shots(row), self._place(self._split_of.get(id(row))))

    def prompt_text(self, tokenizer, row: dict) -> str:
        return prompts.render(tokenizer, self.messages(row), self.cfg.prompt.chat)

    def prompt_ids(self, tokenizer, rows: list[dict], max_len: int | None = None,
                   max_tokens: int | None = None) -> list[list[int]]:
        """Token ids for each row; the chat template already carries any special tokens the model needs.

        With `max_len` (the engine's max_model_len), every prompt must leave room for `max_tokens` (default: the
        task's) generated tokens: a longer one is refused with a DataError naming its row, or, with
        `prompt.truncate`, its question is cut to fit."""
        return self._fit(tokenizer, rows, max_len, max_tokens)[1]

    def fit(self, tokenizer, rows: list[dict], max_len: int, max_tokens: int | None = None) -> list[dict]:
        """The rows, checked as `prompt_ids` checks them; with `prompt.truncate`, a row whose question was cut is
        a copy with the shorter question (for callers that build prompts themselves, like TRL)."""
        return self._fit(tokenizer, rows, max_len, max_tokens)[0]

    def _tokenize(self, tokenizer, texts: list[str]) -> list[list[int]]:
        return tokenizer(texts, add_special_tokens=not self.cfg.prompt.chat)["input_ids"] if texts else []

    def _fit(self, tokenizer, rows: list[dict], max_len: int | None,
             max_tokens: int | None) -> tuple[list[dict], list[list[int]]]:
        texts = [self.prompt_text(tokenizer, r) for r in rows]
        if max_len is None:
            return list(rows), self._tokenize(tokenizer, texts)
        max_tokens = max_tokens or self.cfg.max_tokens
        room = max_len - max_tokens
        if room < 1:
            raise DataError(f"task '{self.name}': max_tokens {max_tokens} leaves no room for a prompt in "
                            f"max_model_len {max_len}; lower max_tokens or raise model.max_model_len")
        # A text longer than this has more than `room` tokens: refused without tokenising it (see max_token_chars).
        chars = room * prompts.max_token_chars(tokenizer)
        short = [i for i, t in enumerate(texts) if len(t) <= chars]
        ids = dict(zip(short, self._tokenize(tokenizer, [texts[i] for i in short])))
        rows, out = list(rows), []
        for i, row in enumerate(rows):
            if i in ids and len(ids[i]) <= room:
                out.append(ids[i])
                continue
            size = f"{len(ids[i]):,} tokens" if i in ids else f"{len(texts[i]):,} characters"
            limit = f"more than the {room:,} tokens that max_model_len {max_len} leaves beside max_tokens {max_tokens}"
            if not self.cfg.prompt.truncate:
                raise DataError(f"{self._where(row)}: the prompt has {size}, {limit}; shorten it or set "
                                f"tasks[].prompt.truncate: true")
            rows[i], cut = self._cut(tokenizer, row, room, limit)
            out.append(cut)
            if self._where(row) not in self._cut_logged:  # once per row, however often it is prompted
                self._cut_logged.add(self._where(row))
                logger.warning("%s: the prompt had %s, %s: its question was cut to fit", self._where(row), size, limit)
        return rows, out

    def _cut(self, tokenizer, row: dict, room: int, limit: str) -> tuple[dict, list[int]]:
        """A copy of the row with its question cut so that its prompt has at most `room` tokens."""
        where = self._where(row)
        if "question" not in {f for _, f, _, _ in string.Formatter().parse(self.cfg.prompt.template) if f}:
            raise DataError(f"{where}: prompt.truncate cuts the question, but the template has no {{question}}")

        def render(question: str) -> tuple[dict, list[int]]:
            cut = {**row, "question": question, _UNCUT: row.get(_UNCUT, row["question"])}
            return cut, self._tokenize(tokenizer, [self.prompt_text(tokenizer, cut)])[0]

        _, bare = render("")
        keep = room - len(bare)
        if keep < 1:
            raise DataError(f"{where}: even with its question cut out the prompt has {len(bare):,} tokens, {limit}")
        question = str(row["question"])[: keep * prompts.max_token_chars(tokenizer)]  # holds the first `keep` tokens
        q_ids = tokenizer(question, add_special_tokens=False)["input_ids"][:keep]
        for _ in range(8):  # the cut question may tokenise a little differently inside the template
            cut, ids = render(tokenizer.decode(q_ids).rstrip("\ufffd"))
            if len(ids) <= room:
                return cut, ids
            q_ids = q_ids[: len(q_ids) - (len(ids) - room)]
        raise DataError(f"{where}: could not cut the question to fit, {limit}")  # pragma: no cover

    def episode_rows(self, rows: list[dict]) -> list[dict]:
        """An environment task's rows as its episodes open: with the task's system turn (`prompt.system`, a
        co-evolved prompt's gene) before each row's prompt."""
        system = self.cfg.prompt.system
        if not system:
            return rows
        return [{**r, "prompt": [{"role": "system", "content": system}, *as_messages(r["prompt"])]} for r in rows]

    def tool_schemas(self) -> list[dict]:
        """An environment task's tools as its episodes show them (descriptions: a co-evolved prompt's gene)."""
        return described(self.environment, self.tool_texts)

    def limits(self) -> Limits:
        """An environment task's episode limits (`environment:` in the recipe)."""
        e = self.cfg.environment
        return Limits(max_turns=e.max_turns, max_tokens=e.max_tokens, turn_tokens=e.turn_tokens, wall_s=e.wall_s)

    def reference(self, row: dict) -> Any:
        ref = self.cfg.reference
        return row[ref] if isinstance(ref, str) else {f: row[f] for f in ref}

    def sampling(self, *, n: int = 1, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                 max_tokens: int | None = None) -> Sampling:
        """Decoding settings for this task: its max_tokens and stop strings, greedy unless told otherwise."""
        return Sampling(n=n, temperature=temperature, top_p=top_p, seed=seed,
                        max_tokens=max_tokens or self.cfg.max_tokens, stop=tuple(self.cfg.stop))

    def score(self, completion: str, row: dict) -> float:
        return float(self.reward(completion, self.reference(row)))


def get_task(name: str, recipe: Recipe | None = None) -> Task:
    """A task from the recipe (by name) or a built-in one."""
    if recipe is not None:
        return Task(recipe.task(name), recipe.base_dir)
    tasks = builtin_tasks()
    if name not in tasks:
        raise DataError(f"unknown task '{name}'; built-in tasks: {', '.join(tasks)} (or pass --recipe)")
    return Task(tasks[name])
