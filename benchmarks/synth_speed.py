"""How close does ``model.synth`` get to the disk's sequential write speed, and in how much memory?

    python benchmarks/synth_speed.py DIR [--preset qwen3.6-35b-a3b] [--mix iq4_nl] [--layers N] [--vocab-dir LLAMA_CPP/models]

1. Disk: writes 2 GiB of zeros with os.write in 8 MiB chunks + fsync (like ``dd conv=fsync``).
2. Synth: writes the preset (default: the full-size 19 GiB qwen3.6-35b-a3b iq4_nl model) to DIR,
   fsync included, and measures throughput and the process's peak RSS.
Prints both speeds and their ratio (target >= 80 %) and the peak RSS (target < 1 GiB). Both files
are deleted afterwards. The full-size run needs ~21 GiB free in DIR: run it rarely.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

from llamaforge.models import facts_from_plan, synth, synth_plan
from llamaforge.models.vocab import find_vocab_dir

GiB = 1 << 30


def disk_write_speed(folder: Path, size: int = 2 * GiB, chunk: int = 8 << 20) -> float:
    """Sequential write speed in bytes/s (zeros, os.write, fsync at the end)."""
    path = folder / ".llamaforge-dd-test"
    buf = bytes(chunk)
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = size
        while left:
            left -= os.write(fd, buf[: min(chunk, left)])
        os.fsync(fd)
    finally:
        os.close(fd)
        dt = time.monotonic() - t0
        path.unlink(missing_ok=True)
    return size / dt


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="folder on the disk to test")
    ap.add_argument("--preset", default="qwen3.6-35b-a3b")
    ap.add_argument("--mix", default="iq4_nl")
    ap.add_argument("--vocab-dir", type=Path, default=None, help="llama.cpp models/ folder (default: found)")
    ap.add_argument("--layers", type=int, default=None, help="override the layer count (a smaller run)")
    ap.add_argument("--keep", action="store_true", help="keep the model file")
    a = ap.parse_args(argv)
    a.dir.mkdir(parents=True, exist_ok=True)
    vocab_dir = a.vocab_dir or find_vocab_dir()
    if vocab_dir is None:
        print("no llama.cpp models/ folder found: pass --vocab-dir", file=sys.stderr)
        return 2

    ov = {"layers": a.layers} if a.layers else None
    planned = facts_from_plan(synth_plan(a.preset, a.mix, overrides=ov)).file_bytes
    print(f"model: {a.preset} {a.mix}, ~{planned / GiB:.2f} GiB")
    disk = disk_write_speed(a.dir)
    print(f"disk sequential write (2 GiB zeros + fsync): {disk / GiB:.2f} GiB/s")

    rss_before = peak_rss_bytes()
    out = a.dir / f"{a.preset}-{a.mix}.synth-bench.gguf"
    try:
        r = synth(a.preset, out, a.mix, overrides=ov, vocab_dir=vocab_dir, progress=sys.stdout.isatty(), overwrite=True)
    finally:
        if not a.keep:
            out.unlink(missing_ok=True)
    speed = r.file_bytes / r.seconds
    rss = peak_rss_bytes()
    print(f"synth: {r.file_bytes / GiB:.2f} GiB in {r.seconds:.1f} s = {speed / GiB:.2f} GiB/s "
          f"({r.tensor_count} tensors, {r.params / 1e9:.2f} B params)")
    print(f"ratio synth/disk: {100 * speed / disk:.0f} %  (target >= 80 %)")
    print(f"peak RSS: {rss / 2**20:.0f} MiB (before synth {rss_before / 2**20:.0f} MiB; target < 1024 MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
