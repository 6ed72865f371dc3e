"""The names stored values are shown and recognised by, in the terminal, the report and the exports.

* backends as llama.cpp names them (``cuda`` → ``CUDA``, ``hip`` → ``ROCm``: llama-bench's "backends");
* sentinel points (``sentinel``, ``sentinel@NAME`` for a variant's series, :mod:`llamaforge.bench.schedule`
  decides when they run, :mod:`.drift` judges them);
* how a point's context was chosen (its stored ``fit_status``);
* the adaptive sweep's threshold heading and a recorded conclusion's anomalies.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..backends import label as backend_label


def display_name(backend: str | None) -> str:
    """How reports and exports name a backend: its :attr:`~llamaforge.backends.Backend.label` (llama.cpp's own
    names: ``cuda`` → ``CUDA``, ``hip`` → ``ROCm``); an unknown backend as given, or ``?``."""
    return backend_label(backend)


#: the failure class of a point llama.cpp cannot run as asked (``-sm row`` on a device without split buffers): a
#: combination explained in one line, not a failure — counted apart everywhere a run's failures are counted
INFEASIBLE = "infeasible"


def is_infeasible(status: str | None, failure_class: str | None) -> bool:
    return status != "ok" and failure_class == INFEASIBLE


SENTINEL_LABEL = "sentinel"


def sentinel_label(label: str = "") -> str:
    """The label of a series' sentinel point: ``sentinel``, or ``sentinel@NAME`` for a variant's series."""
    return f"{SENTINEL_LABEL}@{label}" if label else SENTINEL_LABEL


def is_sentinel(label: str | None) -> bool:
    return label == SENTINEL_LABEL or str(label or "").startswith(SENTINEL_LABEL + "@")


def regular_label(label: str) -> str:
    """The label of the series a sentinel point belongs to (``sentinel@fa-on`` → ``fa-on``)."""
    return label.partition("@")[2] if is_sentinel(label) else label


#: how a point's context was chosen (``point.detail.fit_status``)
FIT_STATUS_NOTES = {
    "fitted": "llama-server fitted the context",
    "fixed": "context fixed by --ctx",
    "unsupported": "this build cannot fit (no --fit): llama.cpp's default context",
    "refused": "llama-server refused to fit (tensor overrides); re-run with -c from llama-fit-params",
    "refused-unfitted": "llama-server refused to fit (tensor overrides) and loaded unfitted",
}


def threshold_heading(axis: str) -> str:
    """The heading of the threshold's column: the first ncmoe with native context, or the most layers
    (``-ngl``) with native context."""
    return "native context from ncmoe" if axis == "ncmoe" else f"native context up to {axis}"


def anomaly_text(conclusions: Mapping, series: str) -> str:
    """A recorded conclusion's anomalies of one series, then its suspects, as text for tables."""
    text = ", ".join(map(str, (conclusions.get("anomalies") or {}).get(series) or [])) or "none"
    sus = (conclusions.get("suspects") or {}).get(series) or []
    return text + (f" (suspects, faster than the trend alone but not after the family control over the sweep: "
                   f"{', '.join(map(str, sus))})" if sus else "")
