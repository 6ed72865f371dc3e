"""Write a pinned source tree as a compact tarball for machines without network.

The tarball carries the upstream commit in its pax global header (``comment``), exactly where
``git archive`` puts it, so the ``tarball:`` source verifies it like an upstream archive. Trimming
drops what builds and benchmarks never need (docs, media, benches, and all vocab GGUFs but the
ones named), taking llama.cpp from ~176 MB to ~11 MB compressed — small enough to carry to a lent
GPU machine.
"""

from __future__ import annotations

import fnmatch
import os
import tarfile
from pathlib import Path

TRIM = ("docs/*", "media/*", "benches/*", "models/ggml-vocab-*", ".git", ".git/*", "*.gguf.inp", "*.gguf.out")
KEEP_VOCABS = ("models/ggml-vocab-qwen35.gguf", "models/ggml-vocab-qwen2.gguf", "models/ggml-vocab-llama-spm.gguf")


def write_tarball(tree: Path, commit: str, out: Path, *, trim: bool = True,
                  keep: tuple[str, ...] = KEEP_VOCABS) -> Path:
    """Tar ``tree`` into ``out`` (gzip) with root folder ``llama.cpp-<commit9>/``; returns ``out``."""
    tree = Path(tree)
    root = f"llama.cpp-{commit[:9]}"
    tmp = out.with_name(out.name + ".part")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": commit}) as tf:
        for dirpath, dirnames, filenames in os.walk(tree):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, tree)
            if rel_dir == ".git" or rel_dir.startswith(".git/"):
                continue
            for name in sorted(filenames):
                rel = os.path.normpath(os.path.join(rel_dir, name))
                if trim and rel not in keep and any(fnmatch.fnmatch(rel, pat) for pat in TRIM):
                    continue
                if rel == ".git":
                    continue
                tf.add(os.path.join(dirpath, name), arcname=f"{root}/{rel}", recursive=False)
    os.replace(tmp, out)
    return out
