"""What a real model can have: the bounds every number read from a GGUF file is checked against.

A GGUF header is data written by strangers. A 70 KB file can claim 2³¹ layers, 2⁶⁴ tensors or a
string of 2⁶³ bytes; anything derived from such a claim (a per-layer list, a ``[None] * n``, a slice)
would take gigabytes or overflow. Every count and length is checked against these bounds *before*
anything is allocated from it, and a file past one is refused with one line (:class:`ModelError`).

The bounds are generous multiples of the largest released models (and of llama.cpp's own limits at
the pinned commit 0c1e570, ``src/llama-hparams.h`` and ``ggml/include/ggml.h``), so a real model never
meets them:

=====================  ==============  ===============================================================
bound                  value           real models / llama.cpp
=====================  ==============  ===============================================================
layers                 4,096           deepest released ≈ 126 (Llama 3.1 405B); ``LLAMA_MAX_LAYERS`` 512
experts                4,096           most released 384 (Kimi K2); ``LLAMA_MAX_EXPERTS`` 1,024
context, window        2²⁴ tokens      longest trained 10,485,760 (Llama 4 Scout)
other counts           < 2³¹           sizes, heads, ranks (llama.cpp reads them as uint32)
tensors                131,072         ≈ 1,100 merged-expert; ≈ 30,000 for old per-expert GGUFs
metadata keys          65,536          ≈ 30–60
array items            1,048,576       largest: ≈ 280,000 BPE merges, 262,144 tokens (Gemma 3)
key / tensor name      4,096 bytes     llama.cpp refuses tensor names of 64 bytes or more
tensor dimensions      4               ``GGML_MAX_DIMS``
one dimension          2³⁶             the largest row or vocab is < 2²⁰
alignment              65,536          32 (``GGUF_DEFAULT_ALIGNMENT``)
=====================  ==============  ===============================================================

:data:`SYNTH_MAX_LAYERS` is lower: a synthetic model exists to be run, and the pinned llama.cpp loads at
most ``LLAMA_MAX_LAYERS`` layers.
"""

from __future__ import annotations

MAX_LAYERS = 4096
MAX_EXPERTS = 4096
MAX_CONTEXT = 1 << 24
MAX_COUNT = 1 << 31
MAX_TENSORS = 1 << 17
MAX_KV = 1 << 16
MAX_ARRAY = 1 << 20
MAX_NAME_BYTES = 4096
MAX_DIMS = 4
MAX_DIM = 1 << 36
MAX_ALIGNMENT = 1 << 16

#: llama.cpp's ``LLAMA_MAX_LAYERS`` at the pinned commit: the most layers ``model.synth`` writes
SYNTH_MAX_LAYERS = 512

#: the fix of every "past a bound" error
CRAFTED_FIX = "use a GGUF written by llama.cpp or gguf-py; this one is damaged or crafted"
