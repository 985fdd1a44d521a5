"""A comparison's records (no weights) copied into the repository, to commit.

    python bench/publish.py ROOT/compose/multitask bench/results/compose/multitask

Copies the JSON, JSONL, Markdown, YAML and PNG files under a comparison (or run) folder, except engine folders,
trainer checkpoints and logs, and PEFT's own files (adapter configs, model cards, tokenizer files), and writes the
folder's parent as ROOT/ and the model cache as CACHE/, so nothing of one machine is committed. Re-running refreshes
what changed; a file the source no longer has stays.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KEEP = {".json", ".jsonl", ".md", ".yaml", ".png"}
SKIP_DIRS = ("engine", "runs", "tensorboard", "snapshots")  # vLLM's folders, TensorBoard, PEFT's copies per step
SKIP_FILES = {"adapter_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "vocab.json", "added_tokens.json", "chat_template.json", "trainer_state.json", "generation_config.json",
              "config.json"}


def records(src: Path) -> list[Path]:
    """The files under `src` to publish, relative to it."""
    out = []
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = f.relative_to(src)
        dirs = rel.parts[:-1]
        if (f.suffix not in KEEP or f.name in SKIP_FILES or any(d in SKIP_DIRS or d.startswith("checkpoint-")
                                                                 for d in dirs)
                or (f.name == "README.md" and dirs and (f.parent / "adapter_config.json").is_file())):
            continue
        out.append(rel)
    return out


def publish(src: Path, dest: Path, root: Path | None = None, cache: Path | None = None) -> list[Path]:
    """Copy `records(src)` to `dest` with `root` (default: src's parent) written ROOT and `cache` (default: the
    model cache) written CACHE; returns what it wrote."""
    from hyper_es.models import cache_dir

    src = src.resolve()
    places = {str((root or src.parent).resolve()): "ROOT", str((cache or cache_dir()).resolve()): "CACHE"}
    written = []
    for rel in records(src):
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        data = (src / rel).read_bytes()
        if rel.suffix != ".png":
            text = data.decode("utf-8")
            for place, name in sorted(places.items(), key=lambda kv: -len(kv[0])):  # the longer path first
                text = text.replace(place, name)
            data = text.encode("utf-8")
        if not out.is_file() or out.read_bytes() != data:
            out.write_bytes(data)
            written.append(out)
    return written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path, help="a comparison or run folder")
    p.add_argument("dest", type=Path, help="where its records go (under bench/results/)")
    p.add_argument("--root", type=Path, help="the folder written ROOT (default: src's parent)")
    args = p.parse_args()
    print(f"{len(publish(args.src, args.dest, args.root))} files written under {args.dest} (the rest unchanged)")


if __name__ == "__main__":
    main()
