"""The memory plan against measured peaks, on CPU, where the same accounting can be measured: SmolLM2-135M's search
engine and final-evaluation engine each run in a fresh process (bench/memory_cpu.py), and each stage's measured peak
host memory (peak RSS of its processes) is within ±25% of the plan's. The gradient job is measured by the bench only:
its plan is 0.72-0.96 of the measured peak (bench/results/memory_cpu.json), short of ±25% (see docs/gpu.md)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import memory_cpu  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.vllm]  # starts vLLM engines (in child processes)
RECIPE = str(ROOT / "recipes/smollm2-135m.yaml")


@pytest.fixture(scope="module")
def plan():
    return {s.name: s for s in memory_cpu.host_plan(RECIPE).stages}


@pytest.mark.parametrize("stage", ["search engine", "final-evaluation engine"])
def test_the_plan_is_within_25_percent_of_the_measured_peak(plan, stage):
    got = memory_cpu.measure(RECIPE, stage)
    ratio = plan[stage].peak / got["peak"]
    assert 0.75 <= ratio <= 1.25, (stage, ratio, got, plan[stage].parts)
