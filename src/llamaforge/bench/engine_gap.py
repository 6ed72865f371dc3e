"""What the engine cross-check measures besides the two engines' speeds, so their gap can be explained.

With ``--engine both`` every point is measured by llama-server (timings the server reports for one
``/completion``) and by llama-bench (tg at a depth equal to the prompt). On an H200 the server's tg came
out at 0.91–0.94× llama-bench's. Three known differences, each isolated by a measurement made **inside
the same start** (so the start-to-start spread cancels, :mod:`llamaforge.judge.paired`):

* **The sampler chain.** llama-bench samples nothing. The server runs, per token, its default chain over
  the whole vocabulary (logit bias, penalties, DRY, top-n-σ, top-k 40, typical, top-p, min-p, XTC,
  temperature, dist; ``temperature: 0`` turns the temperature step into an argmax but keeps the rest) after
  copying every logit into a candidate array. Each measured request of a cross-check start is paired with
  one that asks for the shortest chain (``samplers: ["top_k"], top_k: 1``: a single top-1 pass, then the
  final pick over one candidate) — the same greedy pick (up to ties), less work per token. The top-1 chain
  still copies every logit into the candidate array and scans it once; how much one such pass over the
  vocabulary costs is measured by a third request whose chain makes one more (``samplers: ["temperature",
  "top_k"]``: the temperature-0 step scans the whole vocabulary before the top-1 pass).
* **HTTP and streaming.** ``timings.predicted_per_second`` is timed inside the server, from the first sampled
  token to the last: HTTP is outside it by construction. What a client sees is measured too: each request's
  wall time on this side, and a streamed request (``stream: true``) whose tokens are time-stamped as they
  arrive.
* **Depth.** The server generates at KV lengths prompt … prompt + n − 2 (its actual prompt, tokenised);
  llama-bench's cross-check tg runs at the *requested* prompt size. llama-bench therefore also runs tg at a
  depth equal to the server's actual prompt, in the same process (:func:`bench_depths`), once that prompt is
  known (the server of the build has been measured in this process).

What each side times (llama.cpp 0c1e57098, ``tools/server/server-common.h`` and ``tools/llama-bench``):

* llama-server: ``predicted_per_second`` = (n − 1) / (time from sampling the first token, which comes from the
  prompt's logits, to sampling the last). Each of the n − 1 steps is one decode, the sampler chain over the
  vocabulary (after copying every logit into a candidate array), detokenising and the stop checks; HTTP, JSON
  and the task queue are outside the span. The KV length runs from prompt to prompt + n − 2.
* llama-bench: ``tg N @ dD`` = N / (time of N decodes of one random token each, each followed by a
  synchronise), after D tokens of prompt were processed untimed. The logits are computed and copied to the
  host but never read: nothing is sampled. The KV length runs from D to D + N − 1.

Each measured request of a cross-check start becomes a *round*: the measured (default) request and one of
each :data:`VARIANTS`, in an order rotated from round to round so no variant always runs first. The default
request stays the point's sample (the number every table reports); the round's other requests are kept in
the start's ``extra["engine_gap"]`` (:func:`record`), which :mod:`llamaforge.report.engine_gap` decomposes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: the measured request (no overrides): the server's default sampler chain at temperature 0, not streamed
DEFAULT = "default"
#: request variants of a cross-check round → the fields they override in the measured request's body
VARIANTS: dict[str, dict[str, Any]] = {
    "greedy": {"samplers": ["top_k"], "top_k": 1},
    "extra-pass": {"samplers": ["temperature", "top_k"], "top_k": 1},
    "stream": {"stream": True},
}
#: the record's format (bump when its fields change meaning)
VERSION = 1


def round_order(i: int) -> list[str]:
    """The requests of round ``i`` (0-based): the default and every variant, rotated by ``i``."""
    names = [DEFAULT, *VARIANTS]
    k = i % len(names)
    return names[k:] + names[:k]


def timed(call: Callable[[], dict]) -> tuple[dict, float]:
    """``call()`` and its wall time on this side (ms)."""
    t0 = time.monotonic()
    resp = call()
    return resp, (time.monotonic() - t0) * 1000.0


def request_record(i: int, variant: str, resp: dict, wall_ms: float) -> dict:
    """One request of a round, as stored: the server's own timings, the sampler chain it reports, the wall
    time on this side and, for a streamed request, the client-side generation rate (tokens after the first
    over the time between the first and the last token event)."""
    t = resp.get("timings") or {}
    gs = resp.get("generation_settings") or {}
    rec: dict[str, Any] = {"round": i + 1, "variant": variant, "tg_tps": t.get("predicted_per_second"),
                           "pp_tps": t.get("prompt_per_second"), "predicted_n": t.get("predicted_n"),
                           "predicted_ms": t.get("predicted_ms"), "prompt_ms": t.get("prompt_ms"),
                           "wall_ms": wall_ms, "samplers": gs.get("samplers")}
    client = resp.get("client")
    if isinstance(client, dict):
        rec["client"] = {k: v for k, v in client.items() if k not in ("gaps_ms", "server_gaps_ms")}   # the start's samples keep those
        first, last = client.get("t_first"), client.get("t_last")
        n_after = int(client.get("n_tokens") or 0) - int(client.get("n_first") or 0)
        if first is not None and last is not None and last > first and n_after > 0:
            rec["client_tg_tps"] = n_after / (last - first)
    return rec


def record(requests: list[dict], *, prompt_n: int, n_predict: int) -> dict:
    """A start's ``extra["engine_gap"]``."""
    return {"version": VERSION, "variants": {DEFAULT: {}, **VARIANTS}, "prompt_n": prompt_n, "n_predict": n_predict,
            "requests": requests}


def bench_depths(requested_prompt: int, actual_prompt: int | None) -> list[int]:
    """llama-bench depths of a cross-check point: the requested prompt (the cross-check's tg) and, once known,
    the server's actual prompt (the depth-matched tg)."""
    return sorted({requested_prompt, *([actual_prompt] if actual_prompt else [])})


def bench_record(requested_prompt: int, actual_prompt: int | None, n_predict: int) -> dict:
    """A llama-bench start's ``extra["engine_gap"]``: which depths it measured and why one may be missing."""
    rec: dict[str, Any] = {"version": VERSION, "xc_depth": requested_prompt, "matched_depth": actual_prompt,
                           "n_predict": n_predict}
    if actual_prompt is None:
        rec["why"] = ("the server's prompt of this build was not known yet when this llama-bench process ran "
                      "(the server had not been measured in this process)")
    return rec
