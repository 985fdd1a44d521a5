"""Instruction rewrites a served model proposes for co-evolution's template gene (`coevolve.tasks.<task>.propose`).

They are asked for once per run, before the first generation, from the proposer (`coevolve.proposer`, default the
recipe's model) with seeded sampling, and kept in RUN/proposals.json with every text the model gave and why each was
kept or dropped. The kept ones are template alternatives after the recipe's own, so a resumed run, the Ray actors
and the final evaluation read the same genes from the file and nothing is generated twice. A rewrite is kept when it
is new and has exactly the placeholders of the task's own template: a model's text is only ever a template to fill.
"""

from __future__ import annotations

import string
import time
from pathlib import Path

from hyper_es.errors import DataError
from hyper_es.io import read_json
from hyper_es.sampling import Sampling
from hyper_es.tasks import prompts
from hyper_es.tasks.prompt_genome import PROMPT_FILE

PROPOSALS = "proposals.json"
ASK = ("Rewrite the instruction below for the same problems, so that a student answers them correctly. Keep every "
       "placeholder in braces, such as {{question}}, exactly as it is. Reply with the new instruction only.\n\n"
       "Instruction:\n{template}")
MAX_TOKENS = 160


def fields(template: str) -> set[str]:
    """The placeholders of a template (ValueError: unbalanced braces)."""
    return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}


def accept(text: str, own: str, known: list[str]) -> tuple[str | None, str]:
    """(the rewrite as a template, "kept") or (None, why it was dropped)."""
    t = text.strip()
    if not t:
        return None, "empty"
    try:
        got = fields(t)
    except ValueError:
        return None, "unbalanced braces"
    if got != fields(own):
        return None, f"placeholders {sorted(got)}, not {sorted(fields(own))}"
    if t in known:
        return None, "already a template"
    if len(t) > 4 * len(own) + 400:
        return None, "too long"
    return t, "kept"


def asked(recipe) -> dict:
    """What the recipe asks the proposer for: {"model", "seed", "tasks": {task: {"template", "n"}}}; empty tasks if
    no task proposes."""
    c = recipe.coevolve
    own = {t.name: t.prompt.template for t in recipe.tasks}
    tasks = {n: {"template": own[n], "n": s.propose} for n, s in (c.tasks.items() if c else ()) if s.propose}
    return {"model": (c.proposer if c and c.proposer else recipe.model.name), "seed": c.seed if c else 0,
            "tasks": tasks}


def propose(recipe, generator, tokenizer) -> dict:
    """Ask `generator` (the proposer, served) for each task's rewrites: the record RUN/proposals.json keeps."""
    ask, t0, tokens, out = asked(recipe), time.perf_counter(), 0, {}
    chat = bool(getattr(tokenizer, "chat_template", None))
    for i, (name, want) in enumerate(ask["tasks"].items()):
        text = prompts.render(tokenizer, [{"role": "user", "content": ASK.format(template=want["template"])}], chat)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        sampling = Sampling(n=want["n"], temperature=1.0, max_tokens=MAX_TOKENS, seed=ask["seed"])
        completions = generator.generate([ids], sampling, seeds=[ask["seed"] * 1000 + i])[0]
        tokens += sum(map(len, completions))
        kept, given = [], []
        for c in completions:
            raw = tokenizer.decode(c, skip_special_tokens=True)
            template, why = accept(raw, want["template"], [want["template"], *kept])
            kept += [template] if template else []
            given.append({"text": raw, "kept": template is not None, "why": why})
        out[name] = {"proposals": given, "kept": kept}
    return {"asked": ask, "tasks": out, "tokens": tokens, "seconds": time.perf_counter() - t0}


def read_proposals(recipe, run_dir: str | Path | None) -> dict[str, list[str]]:
    """The kept rewrites per task ({} when the recipe proposes none). One clear error when the run's file is missing
    or was asked for with other settings."""
    ask = asked(recipe)
    if not ask["tasks"]:
        return {}
    path = Path(run_dir or ".") / PROPOSALS
    if not path.is_file():
        raise DataError(f"{path}: missing; the search (or ES) proposes the rewrites before its first generation")
    data = read_json(path, "delete it to propose again")
    if not isinstance(data, dict) or data.get("asked") != ask or not isinstance(data.get("tasks"), dict):
        raise DataError(f"{path}: asked for other rewrites than this recipe's coevolve settings ({ask}); delete it "
                        f"to propose again")
    kept = {t: data["tasks"].get(t, {}).get("kept") for t in ask["tasks"]}
    bad = [t for t, k in kept.items() if not (isinstance(k, list) and all(isinstance(s, str) for s in k))]
    if bad:
        raise DataError(f"{path}: tasks.{bad[0]}.kept must be a list of templates")
    for t, ks in kept.items():
        for k in ks:
            if accept(k, ask["tasks"][t]["template"], [])[0] != k:
                raise DataError(f"{path}: tasks.{t}.kept holds {k!r}, not a rewrite of the task's template")
    return kept


def with_proposals(recipe, run_dir: str | Path | None):
    """The recipe with the run's kept rewrites as template alternatives after its own (and nothing left to propose):
    what the search, its engine actors and the final evaluation render the co-evolved prompts with."""
    kept = read_proposals(recipe, run_dir)
    if not kept:
        return recipe
    c = recipe.coevolve
    spaces = {n: s.model_copy(update={"templates": [*s.templates, *kept.get(n, [])], "propose": 0})
              for n, s in c.tasks.items()}
    return recipe.model_copy(update={"coevolve": c.model_copy(update={"tasks": spaces})})


def proposal_cost(run_dir: str | Path, stage: str) -> tuple[int, float]:
    """(generated tokens, seconds) the proposer spent for this run, charged to the stage (`search` or `es`) that
    co-evolved a prompt (its prompt.json); (0, 0) otherwise."""
    if not (Path(run_dir) / stage / PROMPT_FILE).is_file():
        return 0, 0.0
    return proposals_spent(run_dir)


def proposals_spent(run_dir: str | Path) -> tuple[int, float]:
    """(generated tokens, seconds) of the run's template proposals (RUN/proposals.json); (0, 0) without one."""
    path = Path(run_dir) / PROPOSALS
    if not path.is_file():
        return 0, 0.0
    data = read_json(path, "delete it to propose again")
    return int(data.get("tokens", 0)), float(data.get("seconds", 0.0))
