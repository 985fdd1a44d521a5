#!/usr/bin/env bash
# The suite's tests of everything but vLLM and Ray, run on a CUDA machine: there the HF fallback engine, its in-place
# merges and ES members, the GRPO-LoRA jobs (TRL), multi-turn episodes (TRL's environment_factory and the HF
# engine's turns) and the tiny pipeline all run on the GPU. It prints the versions it
# ran with and pytest's summary, and writes the whole log to OUT/gpu_check.log.
#
#     bash bench/gpu_check.sh [OUT [PYTEST ARGS]]   # e.g. OUT -n 6 (pytest-xdist); needs pip install -e . and pytest
#
# Goldens and bit-for-bit comparisons recorded on the CPU may differ on a GPU (other kernels): read failures with that
# in mind.
set -uo pipefail
out=${1:-.}
shift || true
mkdir -p "$out"
python3 - <<'EOF'
import peft, torch, transformers, trl
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(f"torch {torch.__version__} (GPU: {gpu}), transformers {transformers.__version__}, peft {peft.__version__}, "
      f"trl {trl.__version__}")
from hyper_es import models
models.resolve("tiny-random")  # built once here, not by several test workers at once
EOF
python3 -m pytest -q -p no:cacheprovider -m "not vllm" --timeout 300 --durations 15 \
    tests/test_engine.py tests/test_search_hf.py tests/test_evaluate_hf.py tests/test_es_core.py tests/test_es_run.py \
    tests/test_merge.py tests/test_low_rank.py tests/test_fidelity.py tests/test_directions.py tests/test_search_run.py \
    tests/test_pipeline.py tests/test_export.py tests/test_environments.py tests/test_episode_fitness.py "$@" 2>&1 | tee "$out/gpu_check.log" | tail -60
