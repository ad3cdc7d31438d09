"""Realistic dummy weights (docs/realistic.md, docs/export.md): each tensor filled by its role,
so that a dummy model routes, normalizes and quantizes like a checkpoint; one logical model
per (config, seed, routing, format) over the checkpoint's tensor names, the same in memory,
in every engine's own loader and in an exported checkpoint.

This package's face: the names below are its public API. Its files, from the rule to the
bytes on disk:

- ``rules.py``: the rule per tensor: name, shape, dtype and module to a :class:`Spec` (role,
  distribution, codes, scales), and the tensors the routing's carrier and the speculative
  design both place by (the weights stored (in, out), the tables added to the lookup); pure,
  nothing read or written;
- ``specs.py``: the rule over a whole model (every tensor's spec, the layer count, the
  architecture's facts applied); which tensors vLLM's dummy loader fills;
- ``ssm.py``: what an SSM scan without an output norm multiplies its input by (its C . B
  products' RMS: Jamba, Falcon-H1), from the config, divided out of its output projection;
- ``arch.py``: the architecture facts found by probing the model (post-norms, norm offsets,
  the embedding's multiplier, a MoE's combine-weight sum), for a meta model on a CPU twin;
  ``probes.py``: the probes themselves (forwards with hooks, nothing written); ``combine.py``:
  the probe of what a MoE block's combine weights sum to, and which experts they weight;
  ``nonnegative.py``: the probe of which expert weights take a non-negative activation only
  (their rows then sum to zero; read from the combine probe's first forward);
  ``multipliers.py``: the probe of a constant the code multiplies an inner norm's output by
  before a linear reads it (LongCat-Flash's MLA);
  ``offsets.py``: the probe of each norm's offset (norms alike run once);
  ``twin.py``: that CPU twin, built with its random draws made by the stateless fill;
  ``facts_cache.py``: the facts kept on disk between processes (the package's one trusted
  cache), keyed on everything they depend on;
- ``values.py``: the one byte writer: a spec and a key written into a tensor or a block of
  it (``init_stateless_``), then the routing's overrides;
- ``routing/``: MoE routing profiles realized by the weights (its own face and file map);
- ``speculative/``: speculative decoding realized by the weights: the MTP layers of the
  checkpoints that carry them, a designed greedy stream the draft predicts at a chosen
  acceptance, the draft model of ``export --draft`` (its own face and file map);
- ``formats.py``: the checkpoint formats (bf16 ... nvfp4, mxfp4): which tensors a quantized
  checkpoint holds, its ``quantization_config``;
- ``config_formats.py``: the format a config describes (what an engine given it loads);
- ``hf_model.py``: the transformers side: the model class a config names, the checkpoint's
  names and where each lies in the in-memory tensors;
- ``lazy_tensor.py``: stand-ins for checkpoint tensors that an engine's loader narrows and
  copies, written only at the copy; the views a conversion takes, recorded;
  ``lazy_views.py``: the layouts of the common view ops (squeeze, split, select, slice, ...)
  computed from a stand-in's block, without a meta op; ``meta_views.py``: the quick way to
  place a conversion's results (run on plain meta tensors; the stand-ins where it cannot);
  ``interleaved.py``: a checkpoint tensor whose rows interleave in-memory tensors'
  (Inkling's fused gate/up projections), placed as strided parts of it; ``gathered.py``:
  one a conversion makes by any other moving of elements (Step-3.7's vision q/k rows
  permuted for RoPE, then q, k and v concatenated), its parts found by replaying the
  conversion on element ids;
- ``logical.py``: the logical model: each checkpoint tensor's spec, key and overrides, and
  its writer (every holder of the model takes its bytes from here); the weights iterator an
  engine's loader is fed (small tensors whole, a batch at a time; large ones stand-ins);
- ``kept.py``: a config's logical checkpoint, made once per (config, seed, routing,
  acceptance) in a process (what the engines load);
- ``inplace.py``: :func:`initialize_realistic_dummy_weights`, the fill of a model in place;
- ``safetensors_writer.py``: a safetensors file made a window at a time while a thread writes;
- ``config_file.py``: a caller's config.json read for the commands, every problem one line;
- ``checkpoint_files.py``: the allow-list of files an export copies from the config's folder;
- ``exported_config.py``: the exported config.json: the caller's keys as written, the
  architecture facts the model assumed written out;
- ``publish.py``: OUT published whole or not at all (a private staging directory, one rename);
- ``export.py``: ``python -m fp8_dummy export``: the checks, the checkpoint's files, the CLI;
- ``reports.py``: what the report commands (``routing``, ``acceptance``) share: arguments,
  their checks before any work, their JSON written atomically.

An export's bytes: ``export.py`` -> ``safetensors_writer.py`` -> ``logical.py``
(``LogicalModel.write``) -> ``values.py`` (``fill_``) -> ``fp8_dummy.init_stateless_``."""

from __future__ import annotations

from .arch import DEFAULT, Arch, derive
from .config_formats import config_format
from .formats import FORMATS, Format, UnsupportedFormatError
from .hf_model import (
    UnplacedTensorError,
    build_model,
    checkpoint_names,
    checkpoint_state,
    config_of,
    memory_blocks,
)
from .inplace import initialize_realistic_dummy_weights
from .kept import config_checkpoint
from .lazy_tensor import Block, LazyTensor
from .logical import CheckpointTensor, LogicalModel, logical_model
from .routing import Profile, RoutingError, chosen_routing, parse_routing
from .rules import Spec, module_kind, tensor_spec
from .specs import model_specs, model_tensors
from .speculative import Acceptance, AcceptanceError, chosen_acceptance, parse_acceptance
from .values import fill_

__all__ = ["DEFAULT", "FORMATS", "Acceptance", "AcceptanceError", "Arch", "Block"]
__all__ += ["CheckpointTensor", "Format", "LazyTensor", "chosen_acceptance", "parse_acceptance"]
__all__ += ["LogicalModel", "Profile", "RoutingError", "Spec", "UnplacedTensorError"]
__all__ += ["UnsupportedFormatError", "build_model", "checkpoint_names", "checkpoint_state"]
__all__ += ["chosen_routing", "config_checkpoint", "config_format", "config_of", "derive"]
__all__ += ["fill_", "initialize_realistic_dummy_weights", "logical_model", "memory_blocks"]
__all__ += ["model_specs", "model_tensors", "module_kind", "parse_routing", "tensor_spec"]
