"""`make test`: the suite in two pytest processes side by side, each on its own share of the cores. One runs the
tests marked `vllm` (one engine at a time, its OpenMP threads bound to the first half of the cores), the other
every other test (single-threaded torch, as the conftest sets; a stray engine there is bound to the other half).
On one core the suite runs in one process. Each lane's output is printed when both are done; the exit status is
the first lane's that is not 0 (pytest's 5, "no tests collected", included).

    python scripts/test_lanes.py -q --timeout=900 --durations=25     # arguments go to both pytest processes
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def cores(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def main() -> int:
    args = sys.argv[1:]
    n = os.cpu_count() or 1
    if n < 2:
        return subprocess.call([sys.executable, "-m", "pytest", *args])
    half = n // 2
    lanes = {"vllm": ("vllm", cores(0, half - 1)), "rest": ("not vllm", cores(half, n - 1))}
    t0, procs, logs = time.perf_counter(), {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (marker, bind) in lanes.items():
            logs[name] = Path(tmp) / f"{name}.log"
            env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": bind}
            with logs[name].open("w") as out:
                procs[name] = subprocess.Popen([sys.executable, "-m", "pytest", "-m", marker, *args], env=env,
                                               stdout=out, stderr=subprocess.STDOUT)
        codes = {name: p.wait() for name, p in procs.items()}
        for name, (marker, bind) in lanes.items():
            print(f"===== lane {name} (-m '{marker}', vLLM cores {bind}): exit {codes[name]} =====", flush=True)
            sys.stdout.write(logs[name].read_text())
    print(f"===== both lanes done in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} exit {v}" for k, v in codes.items()) + " =====")
    return next((c for c in codes.values() if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
