import json

import pytest

from hyper_es import DataError
from hyper_es.recipe import TaskConfig
from hyper_es.tasks import Task, builtin_tasks, get_task


def task(**kw) -> Task:
    return Task(TaskConfig.model_validate({"name": "t", "reward": "numeric", **kw}))


def test_builtin_tasks_load_their_test_splits():
    for name in builtin_tasks():
        t = get_task(name)
        rows = t.rows("test")
        assert len(rows) == 100 and all(r["id"] and r["question"] for r in rows)
        assert t.reference(rows[0]) is not None


def test_generated_train_split_is_seeded_and_disjoint_from_test():
    t = get_task("chain_sum")
    train, test = t.rows("train"), t.rows("test")
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert train[:3] == Task(t.cfg).rows("train")[:3]  # same seed, same data


def _generated(partition="question", *, sizes=(300, 60, 200), config=None, **test):
    cfg = {"min_terms": 2, "max_terms": 2, "max_digits": 2, **(config or {})}
    src = {"source": "reasoning_gym", "dataset": "chain_sum", "config": cfg, "partition": partition}
    return task(train={**src, "size": sizes[0], "seed": 1}, val={**src, "size": sizes[1], "seed": 500000},
                test={**src, "size": sizes[2], "seed": 900000, **test})


def test_generated_splits_partition_the_questions_by_hash():
    from hyper_es.tasks.sources import question_hash

    t = _generated()
    stats = t.split_stats()
    assert stats["partition"] == "question" and set(stats["overlap"].values()) == {0}
    assert {s: v["distinct"] for s, v in stats["splits"].items()} == {"train": 300, "val": 60, "test": 200}
    assert {s: v["rows"] for s, v in stats["splits"].items()} == {"train": 300, "val": 60, "test": 200}
    shares = t.shares()  # each split's share of the hash range is its share of the sizes, in split order
    assert shares == {"train": (0.0, 300 / 560), "val": (300 / 560, 360 / 560), "test": (360 / 560, 1.0)}
    for split, (lo, hi) in shares.items():
        assert all(lo <= question_hash(r["question"]) < hi for r in t.rows(split))
    one_digit = {s: sum(len(r["question"].split()[-2]) == 1 for r in t.rows(s)) / len(t.rows(s)) for s in shares}
    assert max(one_digit.values()) - min(one_digit.values()) < 0.1  # one distribution (not train harder)


def test_unpartitioned_splits_keep_their_repeats_and_report_their_overlaps():
    t = _generated("none")
    stats = t.split_stats()
    assert stats["partition"] == "none" and stats["overlap"]["train&val"] == stats["overlap"]["train&test"] == 0
    assert stats["overlap"]["val&test"] > 0 and stats["train_dropped"] > 0  # what partition: question prevents
    assert stats["splits"]["test"]["distinct"] < stats["splits"]["test"]["rows"] == 200


def test_partitioned_splits_must_share_one_generator_config():
    with pytest.raises(ValueError, match="test: with partition 'question' the generated splits share one"):
        _generated(config=None, dataset="basic_arithmetic")


def test_a_problem_space_too_small_for_the_sizes_is_one_clear_error():
    t = _generated(config={"max_digits": 1}, sizes=(300, 60, 200))  # 200 one-digit questions in all
    with pytest.raises(DataError, match=r"reasoning_gym:chain_sum .*only \d+ distinct questions.*`size` asks for 300"):
        t.rows("train")


def test_train_rows_equal_to_a_test_question_are_dropped(tmp_path):
    (tmp_path / "tr.jsonl").write_text("".join(json.dumps({"question": q, "answer": "1"}) + "\n" for q in "abc"))
    (tmp_path / "te.jsonl").write_text(json.dumps({"question": "b", "answer": "1"}) + "\n")
    t = Task(TaskConfig.model_validate({"name": "t", "reward": "numeric",
                                        "train": {"source": "file", "path": "tr.jsonl"},
                                        "test": {"source": "file", "path": "te.jsonl"}}), tmp_path)
    assert [r["question"] for r in t.rows("train")] == ["a", "c"]


def test_countdown_reference_and_reward():
    t = get_task("countdown")
    row = t.rows("test")[0]
    assert set(t.reference(row)) == {"numbers", "target"}
    assert t.score(f"<answer>{row['answer']}</answer>", row) == 1.0
    assert t.score("<answer>1 + 1</answer>", row) == 0.0


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_user_files_in_each_format_with_renamed_fields(tmp_path, fmt):
    rows = [{"problem": f"{i} + 1 = ?", "solution": str(i + 1)} for i in range(5)]
    path = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "csv":
        path.write_text("problem,solution\n" + "".join(f"{r['problem']},{r['solution']}\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    t = Task(TaskConfig.model_validate({
        "name": "t", "reward": "numeric",
        "test": {"source": "file", "path": path.name, "fields": {"question": "problem", "answer": "solution"}},
    }), tmp_path)
    got = t.rows("test")
    assert [r["question"] for r in got] == [r["problem"] for r in rows]
    assert t.score("so \\boxed{3}", got[2]) == 1.0


def test_hf_datasets_source_reads_local_files(tmp_path):
    (tmp_path / "d.jsonl").write_text(json.dumps({"question": "q", "answer": "4"}) + "\n")
    t = task(test={"source": "hf", "path": "json", "data_files": str(tmp_path / "d.jsonl"), "split": "train"})
    assert t.rows("test")[0]["answer"] == "4"


def test_data_errors_name_the_file_line_and_field(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"question": "q", "answer": "1"}\n{oops\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: invalid JSON"):
        task(test={"source": "file", "path": str(tmp_path / "bad.jsonl")}).rows("test")
    with pytest.raises(DataError, match="no such data file"):
        task(test={"source": "file", "path": str(tmp_path / "absent.jsonl")}).rows("test")
    (tmp_path / "noans.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(DataError, match=r"task 't' test \(.*noans.jsonl\) row 0: no field 'answer', needed by `ref"):
        task(test={"source": "file", "path": str(tmp_path / "noans.jsonl")}).rows("test")
    # one row without the reference among rows that have it: named by task, split, source and row id
    (tmp_path / "gap.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"question": "a", "answer": "1"}, {"id": "x7", "question": "b"}, {"question": "c", "answer": "3"}]))
    with pytest.raises(DataError, match=r"^task 't' test \(.*gap.jsonl\) row x7: no field 'answer', needed by `"):
        task(test={"source": "file", "path": str(tmp_path / "gap.jsonl")}).rows("test")
    with pytest.raises(DataError, match="builtin data 'nope' not found; expected one of: .*gsm8k_test100"):
        task(test={"source": "builtin", "name": "nope"}).rows("test")
    with pytest.raises(DataError, match="reasoning_gym dataset 'no_such_gen'"):
        task(train={"source": "reasoning_gym", "dataset": "no_such_gen", "size": 2}).rows("train")


def test_prompt_template_fields_and_few_shot(tiny):
    _, tok = tiny
    t = task(test={"source": "builtin", "name": "chain_sum_test", "limit": 4},
             train={"source": "reasoning_gym", "dataset": "chain_sum", "size": 20, "seed": 3},
             prompt={"system": "Be brief.", "template": "Q: {question}", "few_shot": 2, "shot_answer": "A: {answer}"})
    row = t.rows("test")[0]
    msgs = t.messages(row)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[-1]["content"] == f"Q: {row['question']}" and msgs[2]["content"].startswith("A: ")
    assert t.messages(row) == msgs  # shots are a fixed draw per row
    text = t.prompt_text(tok, row)
    assert text.startswith("<|im_start|>system\nBe brief.") and text.endswith("<|im_start|>assistant\n")
    ids = t.prompt_ids(tok, [row])[0]
    assert tok.decode(ids) == text
    with pytest.raises(DataError, match="has no field 'nope'"):
        task(test={"source": "builtin", "name": "chain_sum_test"}, prompt={"template": "{nope}"}).messages(row)
    with pytest.raises(DataError, match="must be a plain column name"):
        task(test={"source": "builtin", "name": "chain_sum_test"}, prompt={"template": "{question.x}"}).messages(row)


def _long_task(tmp_path, **prompt):
    (tmp_path / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"question": "1 + 1 = ?", "answer": "2"}, {"question": "7" * 5_000_000, "answer": "7"},
        {"question": "3 + 4 + " * 200 + "0 = ?", "answer": "7"}]))
    return task(test={"source": "file", "path": str(tmp_path / "long.jsonl")}, max_tokens=16, prompt=prompt)


def test_over_long_prompts_are_refused_quickly_naming_the_row(tiny, tmp_path):
    """A 5 MB one-word question is refused without tokenising it (byte-level BPE would take minutes); a prompt
    over the limit by its token count is refused too; with prompt.truncate both are cut to fit exactly."""
    import time

    from hyper_es.engine.hf import HFGenerator
    from hyper_es.evaluate import evaluate_task

    _, tok = tiny
    t = _long_task(tmp_path)
    rows = t.rows("test")
    t0 = time.process_time()  # this process's CPU time: what a loaded machine does not stretch
    with pytest.raises(DataError) as exc:
        evaluate_task(HFGenerator(*tiny, max_model_len=512), tok, t)
    assert time.process_time() - t0 < 3
    msg = str(exc.value)
    assert msg.startswith(f"task 't' test ({tmp_path / 'long.jsonl'}) row 1: the prompt has 5,000,") and "\n" not in msg
    assert "more than the 496 tokens that max_model_len 512 leaves beside max_tokens 16" in msg
    assert "prompt.truncate: true" in msg
    with pytest.raises(DataError, match=r"row 2: the prompt has [\d,]+ tokens, more than the 496 tokens"):
        t.prompt_ids(tok, [rows[0], rows[2]], max_len=512)
    assert t.prompt_ids(tok, [rows[0]], max_len=512) == t.prompt_ids(tok, [rows[0]])  # fits: unchanged

    cut = _long_task(tmp_path, truncate=True)
    ids = cut.prompt_ids(tok, cut.rows("test"), max_len=512)
    assert ids[0] == t.prompt_ids(tok, [rows[0]])[0] and all(490 <= len(i) <= 496 for i in ids[1:])
    fitted = cut.fit(tok, cut.rows("test"), 512)
    assert fitted[0] is cut.rows("test")[0] and fitted[1]["question"] == "7" * len(fitted[1]["question"])
    assert time.process_time() - t0 < 10
