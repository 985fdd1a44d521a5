#!/usr/bin/env bash
# The population bench (bench/population_lora.py) on a GPU machine, in one short call: a generation of 32
# candidates, 64 fitness rows per task, in bf16, in place one by one vs as LoRA adapters in one call.
#
#   bash bench/population_lora_gpu.sh RUN/ [RECIPE]
#
# Needs vLLM for CUDA and this package installed (pip install -e .), and RUN/ with LoRA directions of RECIPE's model
# (default RUN/recipe.yaml; the CPU demo's run, runs/demo/, will do). Writes bench/results/population_lora_gpu.json
# and prints whether the goal holds: >= 3x candidates per second over in place, at fidelity <= 1%.
set -euo pipefail
run=${1:?usage: bash bench/population_lora_gpu.sh RUN/ [RECIPE]}
recipe=${2:-$run/recipe.yaml}
out=bench/results/population_lora_gpu.json
python -c "import torch, vllm; assert torch.cuda.is_available(), 'no CUDA device'; print('vllm', vllm.__version__, torch.cuda.get_device_name())"
python bench/population_lora.py --run "$run" --recipe "$recipe" --popsize 32 --minibatch 64 --dtypes bfloat16 --out "$out"
python - "$out" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["comparisons"]["bfloat16"]
ok = c["speed_lora_over_inplace"] >= 3 and c["fidelity_max_lora"] <= 0.01
print(f"goal (>= 3x at fidelity <= 1%): {'met' if ok else 'not met'}: {c['speed_lora_over_inplace']:.2f}x, "
      f"fidelity {c['fidelity_max_lora']:.4f}")
PY
