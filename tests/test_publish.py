"""`bench/publish.py`: a comparison's records go to the repository without weights, engine or trainer folders, and
with no absolute path of the machine that ran it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import publish  # noqa: E402


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_publish_keeps_records_and_writes_places(tmp_path):
    root, cache = tmp_path / "runs", tmp_path / "cache"
    src = root / "multitask"
    _write(src / "seed0" / "main" / "recipe.yaml", f"directions:\n- {root}/adapters/letters\nmodel: {cache}/smollm2\n")
    _write(src / "seed0" / "main" / "eval" / "hyper-es.json", '{"greedy": 0.5}')
    _write(src / "seed0" / "main" / "directions" / "letters" / "manifest.json", "{}")
    for skipped in ("directions/letters/adapter_config.json", "directions/letters/README.md",
                    "directions/letters/adapter_model.safetensors", "engine/config.json",
                    "directions/baseline/checkpoint-5/trainer_state.json", "directions/baseline/runs/x.json",
                    "directions/baseline/snapshots/step-3/README.md"):
        _write(src / "seed0" / "main" / skipped, "x")
    dest = tmp_path / "results"
    written = publish.publish(src, dest, cache=cache)
    got = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert got == ["seed0/main/directions/letters/manifest.json", "seed0/main/eval/hyper-es.json",
                   "seed0/main/recipe.yaml"]
    assert len(written) == 3
    assert (dest / "seed0/main/recipe.yaml").read_text() == "directions:\n- ROOT/adapters/letters\nmodel: CACHE/smollm2\n"
    assert publish.publish(src, dest, cache=cache) == []  # nothing changed: nothing written
    _write(dest / "seed0" / "main" / "eval" / "hyper-es.json", '{"greedy": 0.5, "text": "ROOT is a word"}')

    _write(dest / "seed0" / "main" / "report.json", "{}")
    _write(dest / "seed0" / "grid" / "lr0.001" / "directions" / "baseline" / "manifest.json", "{}")  # no weights
    _write(dest / "seed0" / "grid" / "lr0.001" / "eval" / "val" / "baseline@3.json", "{}")
    root2, cache2 = tmp_path / "new" / "runs", tmp_path / "new" / "cache"  # another machine: the records go back
    _write(root2 / "multitask" / "seed0" / "main" / "directions" / "letters" / "manifest.json", '{"mine": 1}')
    back = publish.restore(dest, root2 / "multitask", cache=cache2)
    assert sorted(p.relative_to(root2).as_posix() for p in back) == [  # a job's record back without its weights:
        "multitask/seed0/grid/lr0.001/directions/baseline/manifest.json",  # collect trains it again
        "multitask/seed0/grid/lr0.001/eval/val/baseline@3.json", "multitask/seed0/main/eval/hyper-es.json",
        "multitask/seed0/main/recipe.yaml", "multitask/seed0/main/report.json"]
    assert (root2 / "multitask/seed0/main/recipe.yaml").read_text() == \
        f"directions:\n- {root2.resolve()}/adapters/letters\nmodel: {cache2.resolve()}/smollm2\n"
    assert "ROOT is a word" in (root2 / "multitask/seed0/main/eval/hyper-es.json").read_text()  # not a path
    assert (root2 / "multitask/seed0/main/directions/letters/manifest.json").read_text() == '{"mine": 1}'  # kept
