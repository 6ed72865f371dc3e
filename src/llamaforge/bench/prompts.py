"""The benchmark prompt: a deterministic multi-turn chat of a target token count.

Like the seed experiment (a faked chat history plus a hard request), but the prose is generated
here from a small word bank with a fixed seed — no copyrighted text, identical on every machine.
The chat is rendered in the model's own chat template by llama-server (``/apply-template``) and
counted with ``/tokenize``; a binary search over the number of sentences picks the longest history
that stays within the target. The exact token count is what gets recorded, and the token ids are
what get sent, so every request of a run processes exactly the same prompt.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

_SUBJECTS = [
    "the old lighthouse keeper", "a tired cartographer", "the river pilot", "a young glassblower",
    "the village archivist", "a travelling clockmaker", "the harbour master", "an apprentice weaver",
    "the night gardener", "a retired astronomer", "the ferry captain", "a stubborn beekeeper",
]
_VERBS = [
    "studied", "repaired", "measured", "remembered", "described", "carried", "questioned", "painted",
    "followed", "rebuilt", "counted", "traded", "guarded", "catalogued", "polished", "translated",
]
_OBJECTS = [
    "the brass instruments of the tower", "a map of the northern marshes", "the ledger of forgotten tides",
    "a crate of blue glass bottles", "the silent bells of the chapel", "a bundle of weathered letters",
    "the copper gears of the town clock", "a basket of winter pears", "the lanterns along the quay",
    "a chart of shifting sandbanks", "the loom in the back room", "a jar of amber honey",
]
_CLAUSES = [
    "while the fog rolled in from the sea", "before the morning bell had rung", "as the wind turned cold",
    "because nobody else remembered how", "although the roads were flooded", "when the market finally closed",
    "until the candles burned low", "long after the ships had left", "even though the rain kept falling",
    "just as the first stars appeared", "since the bridge was still broken", "while the children slept upstairs",
]
_ASIDES = [
    "Nobody in the valley could say why.", "It was, everyone agreed, a strange season.",
    "The details mattered more than anyone expected.", "Some said it had happened once before.",
    "The numbers in the ledger did not quite add up.", "A gull watched from the chimney.",
]
_TOPICS = ["the lighthouse", "the marsh road", "the clock tower", "the winter market", "the glassworks",
           "the flooded bridge", "the old chapel", "the harbour"]

SYSTEM = "You are a careful storyteller who keeps track of every detail of a long conversation."
FINAL_REQUEST = (
    "Now write a poem of exactly fourteen lines about everything that happened in this story. "
    "Every line must mention a different character or object from the chapters above, the lines must "
    "rhyme in the pattern ABAB CDCD EFEF GG, and the first letters of the lines must spell LIGHTHOUSE KEPT. "
    "After the poem, list each line's character or object in a numbered table."
)
SENTENCES_PER_TURN = 12


def sentences(n: int, seed: int = 0) -> list[str]:
    """The first ``n`` sentences of the deterministic story (a prefix of a longer one)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        s = f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_CLAUSES)}."
        if i % 5 == 4:
            s += " " + rng.choice(_ASIDES)
        out.append(s)
    return out


def build_messages(n_sentences: int, seed: int = 0) -> list[dict]:
    """A system message, alternating user/assistant turns carrying ``n_sentences`` of story, and a
    final hard request (like the seed's constrained poem)."""
    msgs: list[dict] = [{"role": "system", "content": SYSTEM}]
    story = sentences(n_sentences, seed)
    for turn, i in enumerate(range(0, len(story), SENTENCES_PER_TURN)):
        topic = _TOPICS[turn % len(_TOPICS)]
        msgs.append({"role": "user", "content": f"Please tell chapter {turn + 1} of the story, about {topic}."})
        chunk = story[i:i + SENTENCES_PER_TURN]
        half = len(chunk) // 2 or len(chunk)
        msgs.append({"role": "assistant", "content": " ".join(chunk[:half]) + ("\n\n" + " ".join(chunk[half:])
                                                                             if chunk[half:] else "")})
    msgs.append({"role": "user", "content": FINAL_REQUEST})
    return msgs


def render_plain(messages: list[dict]) -> str:
    """Fallback rendering for models without a chat template."""
    return "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages) + "\n\nAssistant:"


@dataclass
class Prompt:
    text: str
    tokens: list[int]
    n_sentences: int
    templated: bool          # rendered with the model's chat template (else plain fallback)
    target: int
    cut: bool = False        # plain story text cut to the target (a target shorter than the chat frame)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def to_dict(self) -> dict:
        return {"n_tokens": self.n_tokens, "target": self.target, "n_sentences": self.n_sentences,
                "templated": self.templated, **({"cut": True} if self.cut else {})}


def build_prompt(target_tokens: int, *, tokenize: Callable[[str], list[int]],
                 apply_template: Callable[[list[dict]], str | None], seed: int = 0) -> Prompt:
    """The longest story whose templated prompt has at most ``target_tokens`` tokens.

    ``tokenize`` and ``apply_template`` are a server's ``/tokenize`` and ``/apply-template``
    (:class:`~llamaforge.llamacpp.server.ServerSession` methods); the search needs ~12 calls.
    """
    templated = True

    def render(n: int) -> tuple[str, list[int]]:
        nonlocal templated
        msgs = build_messages(n, seed)
        text = apply_template(msgs) if templated else None
        if text is None:
            templated = False
            text = render_plain(msgs)
        return text, tokenize(text)

    lo_text, lo_toks = render(0)
    if len(lo_toks) > target_tokens:
        return _cut(target_tokens, tokenize, seed)
    best = (0, lo_text, lo_toks)
    if len(lo_toks) < target_tokens:
        # exponential search for an upper bound, then bisect on the sentence count
        hi = 8
        while True:
            text, toks = render(hi)
            if len(toks) > target_tokens:
                break
            best = (hi, text, toks)
            hi *= 2
        lo = best[0]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            text, toks = render(mid)
            if len(toks) <= target_tokens:
                lo, best = mid, (mid, text, toks)
            else:
                hi = mid
    n, text, toks = best
    return Prompt(text=text, tokens=toks, n_sentences=n, templated=templated, target=target_tokens)


def _cut(target_tokens: int, tokenize: Callable[[str], list[int]], seed: int) -> Prompt:
    """A target shorter than the chat frame itself (system message and request: ~100 tokens): the story as
    plain text, its first ``target_tokens`` tokens (a token list is what the server is sent)."""
    n = 8
    while True:
        text = " ".join(sentences(n, seed))
        toks = tokenize(text)
        if len(toks) >= target_tokens:
            return Prompt(text=text, tokens=toks[:target_tokens], n_sentences=n, templated=False,
                          target=target_tokens, cut=True)
        n *= 2
