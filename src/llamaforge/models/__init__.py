"""Models: GGUF facts (:mod:`.gguf_info`), synthetic shape-faithful models (:mod:`.synth`,
:mod:`.presets`, :mod:`.plan`, :mod:`.quants`, :mod:`.vocab`), downloads (:mod:`.download`) and
model references (:mod:`.refs`)."""

from .gguf_info import ModelFacts, facts_from_plan, model_facts, read_plan
from .plan import GENERATOR_VERSION, ModelPlan, TensorPlan
from .presets import MIXES, PRESETS, Shape, get_mix, get_preset
from .refs import resolve_model
from .synth import WriteResult, synth, synth_plan, twin, write_plan

__all__ = ["GENERATOR_VERSION", "MIXES", "PRESETS", "ModelFacts", "ModelPlan", "Shape", "TensorPlan", "WriteResult",
           "facts_from_plan", "get_mix", "get_preset", "model_facts", "read_plan", "resolve_model", "synth", "synth_plan", "twin",
           "write_plan"]
