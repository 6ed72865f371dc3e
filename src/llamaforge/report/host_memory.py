"""Host memory: how much RAM a point needs (peak anonymous memory + the CPU-side weights)."""

from __future__ import annotations

from .data import ReportData
from .format import fmt_mib
from .sections import Section, Table

#: what the section says above its table: why peak RSS alone overstates the RAM a point needs
INTRO = ("Peak RSS counts the model file's pages that llama.cpp mmaps, including those of layers that run on the "
         "GPU and were only read once at load: the kernel can drop such file-backed pages and re-read them. "
         "Anonymous memory (buffers, KV cache, anything copied) it cannot drop. So: RAM needed ≈ peak anonymous "
         "memory + the CPU-side weights (llama.cpp's host model buffer; file-backed with mmap) — below that the "
         "CPU-side experts are re-read from disk on every token. `--mlock` keeps the mapped weights resident and "
         "`--no-mmap` copies them into anonymous memory; both are options (`--extra`), not the default.")


def host_memory_section(data: ReportData) -> Section:
    sec = Section("host-memory", "Host memory: how much RAM is needed", intro=INTRO)
    t = Table(["series", "ncmoe", "peak RSS MiB", "anonymous MiB", "file-backed MiB", "CPU-side weights MiB",
               "≈ RAM needed MiB"], title="Host memory per point (peaks over the point, process tree)")
    for s in data.series:
        for r in s.ok_rows:
            if r.rss_anon_mib is None and r.rss_file_mib is None:
                continue
            cpu_w = r.host_mem.model if r.host_mem else None
            need = None
            if r.rss_anon_mib is not None:
                need = r.rss_anon_mib + (cpu_w if cpu_w is not None else (r.rss_file_mib or 0.0))
            t.rows.append([s.name, str(r.ncmoe), fmt_mib(r.rss_mib), fmt_mib(r.rss_anon_mib), fmt_mib(r.rss_file_mib),
                           fmt_mib(cpu_w), fmt_mib(need)])
            t.data.append({"series": s.name, "ncmoe": r.ncmoe, "rss_mib": r.rss_mib, "anon_mib": r.rss_anon_mib,
                           "file_mib": r.rss_file_mib, "cpu_weights_mib": cpu_w, "need_mib": need})
    if t.rows:
        t.note = ("≈ RAM needed = anonymous + CPU-side weights (or + file-backed where llama.cpp printed no "
                  "memory breakdown).")
        sec.tables.append(t)
    else:
        sec.absent = "anonymous / file-backed memory was not recorded (older run, or not Linux)"
    return sec
