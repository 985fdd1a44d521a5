"""A comparison's records (no weights) copied into the repository, to commit.

    python bench/publish.py ROOT/compose/multitask bench/results/compose/multitask

Copies the JSON, JSONL, Markdown, YAML and PNG files under a comparison (or run) folder, except engine folders,
trainer checkpoints and logs, and PEFT's own files (adapter configs, model cards, tokenizer files), and writes the
folder's parent as ROOT/ and the model cache as CACHE/, so nothing of one machine is committed. Re-running refreshes
what changed; a file the source no longer has stays.

    python bench/publish.py --restore bench/results/compose/multitask ROOT/compose/multitask

puts committed records back into a new ROOT (ROOT/ and CACHE/ written as this machine's paths; a file already there
is kept), so that a comparison begun on another machine goes on there. A finished run is the input of later arms
(`hyper-es compare --arms equal,further` reads a main run's report and validation rows, not its weights); in an
unfinished one (a grid's lr, a main run killed mid-way) each job's record comes back without its weights, which
`collect` reads as a job to train again (GRPO-LoRA here is deterministic: retrained specialists matched their committed
reward curves step for step), while its scored rows and search history are resumed from.
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
    src = src.resolve()
    return _copy(src, dest, records(src), _places(root or src.parent, cache), keep=False)


def restore(src: Path, dest: Path, root: Path | None = None, cache: Path | None = None) -> list[Path]:
    """Committed records `src` back into `dest`, ROOT written as `root` (default: dest's parent) and CACHE as
    `cache`; a file `dest` already has is kept. Returns what it wrote."""
    dest = Path(dest).resolve()
    places = {}  # only where a path was: "ROOT/..." or the bare "ROOT" (a completion that says ROOT is left alone)
    for place, name in _places(root or dest.parent, cache).items():
        places |= {f"{name}/": f"{place}/", f'"{name}"': f'"{place}"'}
    return _copy(Path(src), dest, records(Path(src)), places, keep=True)


def _places(root: Path, cache: Path | None) -> dict[str, str]:
    from hyper_es.models import cache_dir

    return {str(Path(root).resolve()): "ROOT", str(Path(cache or cache_dir()).resolve()): "CACHE"}


def _copy(src: Path, dest: Path, rels: list[Path], places: dict[str, str], *, keep: bool) -> list[Path]:
    """Each of `rels` from `src` to `dest` with every key of `places` written as its value (the longer first)."""
    written = []
    for rel in rels:
        out = dest / rel
        if keep and out.exists():
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        data = (src / rel).read_bytes()
        if rel.suffix != ".png":
            text = data.decode("utf-8")
            for place, name in sorted(places.items(), key=lambda kv: -len(kv[0])):
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
    p.add_argument("--root", type=Path, help="the folder written ROOT (default: src's parent; with --restore, dest's)")
    p.add_argument("--restore", action="store_true", help="the other way: committed records SRC back into a run DEST")
    args = p.parse_args()
    n = len((restore if args.restore else publish)(args.src, args.dest, args.root))
    print(f"{n} files written under {args.dest} (the rest unchanged)")


if __name__ == "__main__":
    main()
