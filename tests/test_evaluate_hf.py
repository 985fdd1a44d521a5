import json

import pytest

from hyper_es.evaluate import EvalJob, Sampling, evaluate_task, evaluate_tasks
from hyper_es.engine.base import truncate_at_stop
from hyper_es.engine.hf import HFGenerator
from hyper_es.tasks import get_task
from recipes import tiny_data


@pytest.fixture(scope="module")
def gen(tiny):
    model, tok = tiny
    return HFGenerator(model, tok, batch_size=5)


@pytest.fixture(scope="module")
def prompts(tiny):
    t = get_task("chain_sum")
    return t.prompt_ids(tiny[1], t.rows("test")[:12])


def test_greedy_is_deterministic_and_batch_independent(tiny, gen, prompts):
    a = gen.generate(prompts, Sampling(max_tokens=12))
    assert len(a) == 12 and all(len(x) == 1 and len(x[0]) == 12 for x in a)
    one = HFGenerator(*tiny, batch_size=1).generate(prompts, Sampling(max_tokens=12))
    assert a == one  # left padding does not change greedy outputs
    assert len({tuple(x[0]) for x in a}) > 1  # the tiny model's outputs depend on the prompt


def test_sampling_is_seeded(gen, prompts):
    s = Sampling(n=4, temperature=1.0, max_tokens=8, seed=3)
    a, b = gen.generate(prompts[:3], s), gen.generate(prompts[:3], s)
    assert a == b and all(len(x) == 4 for x in a)
    assert len({tuple(c) for c in a[0]}) > 1
    assert gen.generate(prompts[:3], Sampling(n=4, temperature=1.0, max_tokens=8, seed=4)) != a


def test_sampling_rejects_greedy_with_n():
    with pytest.raises(ValueError, match="needs temperature > 0"):
        Sampling(n=4, temperature=0.0)


def test_stop_strings_cut_text():
    assert truncate_at_stop("abc</answer>def", ("</answer>", "zz")) == "abc"
    assert truncate_at_stop("abc", ("x",)) == "abc"


def test_evaluate_task_scores_and_counts(tiny, gen):
    from hyper_es import rewards

    t = get_task("chain_sum")
    res = evaluate_task(gen, tiny[1], t, sampling=Sampling(n=2, temperature=1.0, max_tokens=6), ks=(1, 2), limit=7)
    assert res.problems == 7 and res.n == 2 and set(res.pass_at) == {1, 2}
    assert len(res.records) == 7 and all(len(r["completions"]) == 2 for r in res.records)
    assert 0 < res.tokens <= 7 * 2 * 6  # eos may end some completions early
    # Scores are the task's reward applied to the decoded completions.
    r0 = res.records[0]
    assert r0["scores"] == [rewards.get("numeric")(c, r0["reference"]) for c in r0["completions"]]
    with pytest.raises(ValueError, match="pass@4 needs n >= 4"):
        evaluate_task(gen, tiny[1], t, sampling=Sampling(max_tokens=4), ks=(4,), limit=2)


def jobs_in_one_call_score_as_one_by_one(gen, tok):
    """Greedy and sampled jobs of two tasks in one `evaluate_tasks` call: the records, Pass@k and tokens of each
    equal its own `evaluate_task` call, and the shares of the call's time add up."""
    a, b = get_task("chain_sum"), get_task("countdown")
    s = Sampling(n=3, temperature=1.0, max_tokens=6, seed=5)
    jobs = [EvalJob(a, limit=4, sampling=Sampling(max_tokens=6)), EvalJob(b, limit=3, sampling=s, ks=(1, 3)),
            EvalJob(a, split="train", limit=2, sampling=s, ks=(1, 2))]
    together = evaluate_tasks(gen, tok, jobs)
    alone = [evaluate_task(gen, tok, j.task, split=j.split, sampling=j.sampling, ks=j.ks, limit=j.limit) for j in jobs]
    for t, o in zip(together, alone, strict=True):
        assert (t.records, t.pass_at, t.tokens, t.split, t.n) == (o.records, o.pass_at, o.tokens, o.split, o.n)
    assert any(len(set(r["completions"])) > 1 for r in together[1].records)  # sampled: completions differ
    assert all(t.seconds > 0 for t in together)


def test_jobs_in_one_call_score_as_one_by_one_hf(tiny, gen):
    jobs_in_one_call_score_as_one_by_one(gen, tiny[1])


def test_cli_eval_hf_writes_json_and_prints_table(cli, tmp_path):
    out = tmp_path / "r.json"
    proc = cli("eval", "--model", "tiny-random", "--task", "chain_sum", "--task", "countdown", "--backend", "hf",
               "--limit", "4", "--k", "1,2", "--max-tokens", "8", "--out", out)
    assert proc.exit_code == 0, proc.stderr
    assert "pass@2" in proc.stdout and "countdown" in proc.stdout
    data = json.loads(out.read_text())
    assert [r["task"] for r in data["results"]] == ["chain_sum", "countdown"]
    assert data["results"][0]["n"] == 2 and data["results"][0]["temperature"] == 1.0
    assert data["command"].startswith("hyper-es eval --model tiny-random")


@pytest.mark.parametrize("args,message", [
    (["--task", "nope"], "unknown task 'nope'"),
    (["--task", "chain_sum", "--k", "0"], "--k: expected comma-separated positive integers"),
    (["--task", "chain_sum", "--backend", "tpu"], "--backend: expected vllm or hf"),
])
def test_cli_eval_bad_input(cli, args, message):
    proc = cli("eval", "--model", "tiny-random", *args)
    assert proc.exit_code == 2 and message in proc.stderr


def test_cli_eval_refuses_an_over_long_prompt_in_one_line(cli, tmp_path):
    """A 5 MB one-word question: refused in well under a second (without tokenising it), exit 2, one line."""
    (tmp_path / "long.jsonl").write_text(json.dumps({"question": "1 + 1 = ?", "answer": "2"}) + "\n"
                                         + json.dumps({"question": "x" * 5_000_000, "answer": "7"}) + "\n")
    (tmp_path / "r.yaml").write_text(
        "name: long\nmodel: {name: tiny-random, dtype: float32, max_model_len: 512}\n"
        "tasks:\n  - {name: longq, reward: numeric, max_tokens: 16, test: {source: file, path: long.jsonl}}\n")
    proc = cli("eval", "--recipe", tmp_path / "r.yaml", "--task", "longq", "--backend", "hf")
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]  # (beside progress bars)
    assert proc.exit_code == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: task 'longq' test ({tmp_path / 'long.jsonl'}) row 1: the prompt has 5,000,")
    assert "max_model_len 512" in lines[0]


def test_pass_k_tasks_samples_only_the_named_tasks(tiny, gen):
    """eval.pass_k_tasks: the named tasks get Pass@k and sample records; the others greedy only. An unknown name is
    refused with the field path."""

    import hyper_es as hx
    from hyper_es.errors import RecipeError
    from hyper_es.evaluate.final import score_test_sets
    from hyper_es.tasks import Task

    data = tiny_data({"eval": {"k": [1, 2], "limit": 3, "pass_k_tasks": ["chain_sum"]}})
    data["tasks"].append({**data["tasks"][0], "name": "chain_sum_b", "train": None, "val": None})
    recipe = hx.recipe.recipe_from_dict(data, "tiny.yaml")
    tasks = [Task(t, recipe.base_dir) for t in recipe.tasks]
    res = score_test_sets(gen, tiny[1], tasks, recipe.eval, pass_k=True)
    assert "pass@2" in res["chain_sum"] and "correct" in res["chain_sum"]["records"]
    assert set(res["chain_sum_b"]) == {"greedy", "problems", "tokens", "records"}
    assert res["chain_sum_b"]["greedy"] == res["chain_sum"]["greedy"]  # the same rows, prompt and weights
    data["eval"]["pass_k_tasks"] = ["gsm8k"]
    with pytest.raises(RecipeError, match=r"eval\.pass_k_tasks\[0\].*'gsm8k'.*expected one of: chain_sum"):
        hx.recipe.recipe_from_dict(data, "tiny.yaml")
