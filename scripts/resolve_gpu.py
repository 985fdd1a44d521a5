#!/usr/bin/env python
"""Check that pip's resolver accepts constraints-gpu.txt with the vllm and ray extras, and write what it picked to
bench/results/gpu-resolve/resolved.txt (name==version per line, the command, the date and pip's version on top).

    python scripts/resolve_gpu.py [--report R.json]     # about 90 s and a few MB of downloads

No big wheel is downloaded: `--dry-run` stops after resolving, and `--use-feature=fast-deps` reads each wheel's
metadata with HTTP range requests. pip's own settings on this machine (local wheel folders, extra indexes, caps)
are left out, so the answer is PyPI's. The resolve is for this interpreter's Python and platform; on Linux x86_64
PyPI's torch is the CUDA build, which is what GPU users get. Exit status 1 when a pin is not what pip picked.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints-gpu.txt"
OUT = ROOT / "bench" / "results" / "gpu-resolve" / "resolved.txt"
SPEC = ".[vllm,ray]"


def pins(path: Path) -> dict[str, str]:
    """{normalised name: version} of a constraints file's name==version lines."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[norm(name)] = version.strip()
    return out


def norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def resolve(report: Path) -> tuple[list[str], dict]:
    """(the command as run, the parsed report)."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--use-feature=fast-deps",
           "--report", str(report), "-c", CONSTRAINTS.name, "-e", SPEC]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no site or user pip settings
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"pip's resolver refused constraints-gpu.txt:\n{res.stderr[-4000:]}")
    return cmd, json.loads(report.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", type=Path, help="also keep pip's raw report here (about 3 MB)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = args.report or Path(tmp) / "R.json"
        cmd, report = resolve(report_path)
    picked = {m["name"]: m["version"] for m in (i["metadata"] for i in report["install"])
              if norm(m["name"]) != "hyper-es"}
    by_norm = {norm(n): v for n, v in picked.items()}
    wrong = [f"{n}=={v} (pip picked {by_norm.get(n, 'nothing')})" for n, v in pins(CONSTRAINTS).items()
             if by_norm.get(n) != v]
    env = report["environment"]
    shown = ["python", "-m", "pip", *cmd[3:]]
    shown[shown.index("--report") + 1] = "R.json"
    wheels = {norm(i["metadata"]["name"]): i["download_info"]["url"].rsplit("/", 1)[-1] for i in report["install"]}
    head = ["# pip's resolver on constraints-gpu.txt; written by scripts/resolve_gpu.py (resolved, not installed)",
            f"# command: {' '.join(shown[:-1])} '{SPEC}'",
            f"# date: {datetime.date.today().isoformat()}, pip {report['pip_version']}, "
            f"Python {env['python_full_version']}, {env['sys_platform']} {env['platform_machine']}",
            f"# {len(picked)} packages; torch is {wheels.get('torch')} (PyPI's build: CUDA on Linux), vllm is "
            f"{wheels.get('vllm')}"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(head + [f"{n}=={v}" for n, v in sorted(picked.items(), key=lambda i: norm(i[0]))])
                        + "\n")
    print(f"{len(picked)} packages resolved; written to {args.out}")
    if wrong:
        print("pins that pip did not pick: " + "; ".join(wrong), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
