"""Checks on the held-out test files shipped in data/ (fast, no network)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
MANIFEST = json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))
GENERATED = {name: info for name, info in MANIFEST.items() if info.get("generator")}


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines()]


def test_manifest_lists_expected_files():
    assert set(MANIFEST) == {
        "gsm8k_test100.jsonl",
        "basic_arithmetic_test.jsonl",
        "chain_sum_test.jsonl",
        "countdown_test.jsonl",
        "gsm_symbolic_test.jsonl",
    }


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_file_matches_manifest(name):
    info, path = MANIFEST[name], DATA / name
    assert path.is_file()
    raw = path.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == info["sha256"]
    assert raw.endswith(b"\n")
    rows = load(name)
    assert len(rows) == info["count"]
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert isinstance(r["question"], str) and r["question"].strip()
        assert isinstance(r["answer"], str) and r["answer"].strip()


def test_gsm8k_rows():
    for r in load("gsm8k_test100.jsonl"):
        float(r["answer"])  # numeric, no thousands separators
        assert "," not in r["answer"]
        assert r["id"] == f"gsm8k-{r['id_orig']}" and isinstance(r["id_orig"], int)
        assert r["solution"] and "####" not in r["solution"]


def test_countdown_rows():
    for r in load("countdown_test.jsonl"):
        nums = r["numbers"]
        assert isinstance(nums, list) and 3 <= len(nums) <= 4
        assert all(isinstance(n, int) and not isinstance(n, bool) for n in nums)
        assert isinstance(r["target"], int) and str(r["target"]) in r["question"]


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_regenerates_from_seed(name):
    rg = pytest.importorskip("reasoning_gym")
    info = GENERATED[name]
    ds = rg.create_dataset(info["generator"], size=info["count"], seed=info["seed"], **info["config"])
    expected = [ds[i]["question"] for i in range(5)]
    assert [r["question"] for r in load(name)[:5]] == expected
