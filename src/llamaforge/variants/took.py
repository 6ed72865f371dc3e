"""Did a knob take effect? Decided from what the binary printed (:mod:`.observe`), never from what was asked.

Three answers (:class:`Status`):

* ``took`` — the fact the knob controls differs from the variant without it (or, with no such variant in
  the run, shows the value asked for);
* ``not taken`` — it does not: ``-fa on`` where flash attention was enabled anyway, ``-nkvo`` on a build
  that keeps nothing on a device, ``GGML_VK_DISABLE_COOPMAT`` on a device without coopmat (the device line
  reads the same with and without it). Such a knob is flagged and its pair is **not reported as a
  difference**;
* ``unverified`` — nothing the binary prints shows this knob (e.g. ``GGML_CUDA_DISABLE_GRAPHS``): the
  difference is reported and marked unverified.

The facts per knob: flash attention → the resolved ``flash_attn``; KV cache type → ``type_k``/``type_v``;
KV offload → where the KV buffers are (and whether anything is on a device at all); ``-ngl`` → layers
offloaded; ``-c``/``-b``/``-ub``/``-t`` → the context's settings; ``--no-mmap`` → the mapped model buffer;
an environment variable with a device-line field → that field in ``llama-bench --list-devices`` with and
without it. Build knobs (backend, pin, defines) change the binary itself: always ``took``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .knobs import BY_NAME
from .observe import Facts

TOOK, NOT_TAKEN, UNVERIFIED = "took", "not taken", "unverified"

#: knob → the observed facts it controls
ARG_FACTS: dict[str, tuple[str, ...]] = {
    "--flash-attn": ("flash_attn",), "kv-cache-type": ("type_k", "type_v"), "--kv-offload": ("kv_on_device",),
    "--n-gpu-layers": ("offloaded_layers", "model_on_device"), "--ctx-size": ("n_ctx",), "--batch-size": ("n_batch",),
    "--ubatch-size": ("n_ubatch",), "--threads": ("threads",), "--mmap": ("mmap",),
}
_ON = {"on", "1", "true", "enabled", "yes"}
_OFF = {"off", "0", "false", "disabled", "no"}


@dataclass(frozen=True)
class Status:
    knob: str
    status: str          # took | not taken | unverified
    why: str

    def to_dict(self) -> dict:
        return {"knob": self.knob, "status": self.status, "why": self.why}


def _expected(knob: str, value: str) -> dict:
    """The facts a knob's value asks for (``{}``: nothing definite, e.g. ``-fa auto``)."""
    v = value.lower()
    if knob == "--flash-attn":
        return {"flash_attn": "enabled"} if v in _ON else {"flash_attn": "disabled"} if v in _OFF else {}
    if knob == "kv-cache-type":
        parts = dict(p.split("=", 1) for p in value.split(",") if "=" in p)
        return {f"type_{s}": t for s, t in parts.items()}
    if knob == "--kv-offload":
        return {"kv_on_device": v in _ON}
    if knob == "--mmap":
        return {"mmap": v in _ON}
    if knob in ("--ctx-size", "--batch-size", "--ubatch-size", "--threads") and v.isdigit() and int(v) > 0:
        return {ARG_FACTS[knob][0]: int(v)}
    return {}


def _show(facts: Facts, keys: Sequence[str]) -> str:
    return ", ".join(f"{k} {facts.get(k, '?')}" for k in keys)


def _nothing_on_device(knob: str, facts: Sequence[Facts]) -> bool:
    """A GPU-only knob on a run where no model buffer is on a device: it has nothing to act on."""
    return knob in ("--kv-offload", "--n-gpu-layers") and bool(facts) and all(
        f.get("model_on_device") is False for f in facts)


def single(knob: str, value: str, facts: Sequence[Facts], devices: dict | None = None,
           base_devices: dict | None = None) -> Status:
    """A variant's knob judged on its own launches (``facts``: the observed facts of its points) and, for an
    environment variable, its device listing against the build's without it."""
    if knob.startswith(("define:", "backend", "pin")):
        return Status(knob, TOOK, "another binary")
    if knob.startswith("env:"):
        return _env_single(knob[4:], devices, base_devices)
    if _nothing_on_device(knob, facts):
        return Status(knob, NOT_TAKEN, "nothing is on a GPU device in this build's log (every model and KV buffer "
                                       "is host memory), so this GPU option has nothing to act on")
    want = _expected(knob, value)
    if not want or not facts:
        return Status(knob, UNVERIFIED, "the log shows nothing this option controls" if knob not in ARG_FACTS
                      else "no definite value to check in the log")
    bad = [f for f in facts if any(f.get(k) is not None and f.get(k) != v for k, v in want.items())]
    if bad:
        return Status(knob, NOT_TAKEN, f"asked {_show(want, list(want))}; the log shows {_show(bad[0], list(want))}")
    seen = [f for f in facts if all(f.get(k) is not None for k in want)]
    if not seen:
        return Status(knob, UNVERIFIED, "the log does not show " + ", ".join(want))
    return Status(knob, TOOK, f"the log shows {_show(seen[0], list(want))}")


def _vk_field(d: dict | None, field: str) -> list[str]:
    if d is None:
        return []
    if field == "devices":
        return list(d.get("devices") or [])
    return [str(x.get(field)) for x in d.get("vulkan") or []]


def _env_single(name: str, devices: dict | None, base: dict | None) -> Status:
    k = BY_NAME.get(name)
    if k is None or k.device_field is None:
        return Status(f"env:{name}", UNVERIFIED, "no line the binary prints shows this variable")
    mine, theirs = _vk_field(devices, k.device_field), _vk_field(base, k.device_field)
    if not mine:
        return Status(f"env:{name}", UNVERIFIED, f"the device listing shows no {k.device_field.replace('_', ' ')}")
    label = k.device_field.replace("_", " ")
    if base is not None and mine == theirs:
        return Status(f"env:{name}", NOT_TAKEN, f"the device line reads {label}: {', '.join(mine)} with and without it")
    if k.expect and any(v in k.expect.split(",") for v in mine):
        return Status(f"env:{name}", NOT_TAKEN, f"the device line still reads {label}: {', '.join(mine)}")
    return Status(f"env:{name}", TOOK, f"device line {label}: {', '.join(theirs) or '?'} → {', '.join(mine)}")


def pair(knob: str, facts_a: Sequence[Facts], facts_b: Sequence[Facts], devices_a: dict | None = None,
         devices_b: dict | None = None) -> Status:
    """A knob in which two variants differ, judged on both: ``not taken`` when the facts it controls read the
    same in both at every common point (``facts_x[i]``: point i's observed facts)."""
    if knob.startswith(("define:", "backend", "pin")):
        return Status(knob, TOOK, "another binary")
    if knob.startswith("env:"):
        k = BY_NAME.get(knob[4:])
        if k is None or k.device_field is None:
            return Status(knob, UNVERIFIED, "no line the binary prints shows this variable")
        a, b = _vk_field(devices_a, k.device_field), _vk_field(devices_b, k.device_field)
        label = k.device_field.replace("_", " ")
        if a and a == b:
            return Status(knob, NOT_TAKEN, f"the device line reads {label}: {', '.join(a)} in both")
        return Status(knob, TOOK if a and b else UNVERIFIED, f"device line {label}: {', '.join(a) or '?'} vs "
                                                             f"{', '.join(b) or '?'}")
    keys = ARG_FACTS.get(knob)
    if not keys:
        return Status(knob, UNVERIFIED, "the log shows nothing this option controls")
    if _nothing_on_device(knob, [*facts_a, *facts_b]):
        return Status(knob, NOT_TAKEN, "nothing is on a GPU device in either log (every model and KV buffer is host "
                                       "memory), so this GPU option has nothing to act on")
    both = [(fa, fb) for fa, fb in zip(facts_a, facts_b, strict=False)
            if any(fa.get(k) is not None for k in keys) and any(fb.get(k) is not None for k in keys)]
    if not both:
        return Status(knob, UNVERIFIED, "the logs do not show " + ", ".join(keys))
    differ = [(fa, fb) for fa, fb in both if any(fa.get(k) != fb.get(k) for k in keys)]
    if not differ:
        return Status(knob, NOT_TAKEN, f"{_show(both[0][0], keys)} in both")
    fa, fb = differ[0]
    return Status(knob, TOOK, f"{_show(fa, keys)} vs {_show(fb, keys)}")
