"""The architecture facts the realistic rule needs beyond a tensor's name and shape, found by
probing the model itself, never by its name (docs/realistic.md#the-rule-per-architecture):
which norms sit on a residual branch's output (post-norm, sandwich), which norms compute
``(c + w) * x / rms(x)`` (Gemma's c = 1), and by what the model's code multiplies the
embedding lookup (Gemma's √hidden). Only transformers models are probed (a forward of 8
tokens, nothing written); any other model, or a probe that fails, gets :data:`DEFAULT`,
the plain pre-norm rule (vLLM's load format has no model forward to probe)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import torch

from .hf_model import is_transformers_model, own_tensors
from .rules import RESIDUAL

__all__ = ["DEFAULT", "TWIN_BUDGET_BYTES", "Arch", "derive", "derive_twin"]

_TOKENS = 8


class Arch(NamedTuple):
    """What the rule adapts to; the defaults are the plain pre-norm transformer's."""

    embed_scale: float = 1.0  # what the code multiplies the embedding lookup by
    post: frozenset = frozenset()  # module names of norms applied to a branch's output
    offset: Mapping[str, float] = {}  # module name -> c of a (c + w) norm
    residual: frozenset = frozenset()  # module names of each branch's last linear
    gains: frozenset = frozenset()  # tensor names of a layer's own vectors and scalars

    def norm_value(self, module: str, layers: int) -> float:
        """The constant a norm's weight gets: an effective gain of 1, or 1/√(2L) on a
        residual branch's output (the branch then adds as much as GPT-2's scaled
        ``o_proj``/``down_proj`` do), less the norm's own offset."""
        gain = (2 * layers) ** -0.5 if module in self.post else 1.0
        return gain - self.offset.get(module, 0.0)


DEFAULT = Arch()


TWIN_BUDGET_BYTES = 1 << 30  # the largest model built for real to probe its architecture's facts


def derive_twin(model: torch.nn.Module) -> Arch:
    """The facts of a model on the meta device: probed on a twin built on the CPU from the same
    config, in the model's dtype, where it takes at most :data:`TWIN_BUDGET_BYTES` in float32 (small
    and test models, so that their export is their in-memory fill), else the plain rule
    (docs/export.md)."""
    if not is_transformers_model(model):
        return DEFAULT
    size = sum(t.numel() for t in own_tensors(model).values()) * 4
    if size > TWIN_BUDGET_BYTES:
        return DEFAULT
    floats = [t.dtype for t in own_tensors(model).values() if t.dtype.is_floating_point]
    dtype = max(set(floats), key=floats.count) if floats else torch.float32
    try:
        with torch.device("cpu"):  # in the model's own dtype: the probes are run in it
            twin = type(model)._from_config(model.config, dtype=dtype)
    except Exception:  # a class that cannot be built here: the plain rule, as for vLLM's
        return DEFAULT
    return derive(twin)


class _Stop(Exception):
    """Raised by a hook to end a probe's forward early."""


def derive(model: torch.nn.Module) -> Arch:
    """The model's :class:`Arch`, by probes that write nothing; :data:`DEFAULT` for a model
    that is not a transformers model, has no decoder layers, or has a tensor on neither CPU
    nor CUDA (the meta device included)."""
    if not any(c.__module__.startswith("transformers.") for c in type(model).__mro__):
        return DEFAULT
    params = list(model.parameters())
    if not params or any(p.device.type not in ("cpu", "cuda") for p in params):
        return DEFAULT  # meta (nothing to run) or a device the fill refuses anyway
    layers = _decoder_layers(model)
    if not layers:
        return DEFAULT
    modes = {m: m.training for m in model.modules()}
    model.eval()
    failed: list[str] = []
    try:
        with torch.no_grad():
            post, residual = _dataflow(model, layers, failed)
            if post and _shrinks_residual(model, layers[0], post, failed):
                post = frozenset()  # the code keeps the variance itself (Beam): gain 1
            gains = _layer_gains(layers)
            embed = _embed_scale(model, layers[0], failed)
            return Arch(embed, post, _offsets(model), residual, gains)
    finally:
        for m, mode in modes.items():
            m.training = mode
        for why in failed:
            warnings.warn(f"fp8_dummy: {type(model).__name__}: {why}", RuntimeWarning, stacklevel=3)


def _is_norm(name: str, module: torch.nn.Module) -> bool:
    """realistic.py's norm test (a norm class, or a module named ``*norm*``) on a module
    without matrices (``RobertaPreLayerNormAttention`` is no norm)."""
    norm_class = "Norm" in type(module).__name__
    norm_class |= isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm))
    if any(p.dim() >= 2 for p in module.parameters()):
        return False
    return norm_class or "norm" in name.rsplit(".", 1)[-1]


def _decoder_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The longest ``ModuleList`` named ``layers``, ``h`` or ``blocks``: (full name, layer)."""
    best: list = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in (
            "layers", "h", "blocks", "layer",
        ):  # fmt: skip
            if len(m) > len(best):
                best = [(f"{name}.{i}", child) for i, child in enumerate(m)]
    return best


def _forward(model: torch.nn.Module, params: Mapping[str, torch.Tensor] | None = None) -> str:
    """The model on 8 token ids, with ``params`` substituted (nothing written), until a hook's
    :class:`_Stop` or the end: "", or why it failed (the probe then gets the plain rule's
    fact: what its hooks saw before the failure is not the model's dataflow)."""
    device = next(model.parameters()).device
    ids = torch.arange(_TOKENS, device=device)[None]
    call = (lambda **kw: torch.func.functional_call(model, dict(params), (), kw)) if params else (
        lambda **kw: model(**kw)
    )  # fmt: skip
    why = ""
    for kw in ({"input_ids": ids, "use_cache": False}, {"input_ids": ids}):
        try:
            call(**kw)
        except _Stop:
            return ""
        except TypeError as e:  # use_cache not taken: without it
            why = f"TypeError: {e}"
            continue
        except Exception as e:  # noqa: BLE001 (a probe never raises: the plain rule instead)
            return f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return ""
    return why.splitlines()[0][:300]


def _input_of(args: tuple, kwargs: dict):
    x = args[0] if args else kwargs.get("hidden_states")
    return x if isinstance(x, torch.Tensor) else None


def _embed_scale(model: torch.nn.Module, first: tuple[str, torch.nn.Module], failed: list) -> float:
    """c where the first layer's input is c x the embedding lookup plus what does not depend
    on it (positions): the lookup with every row P and then 2P (P = ±1, exact in any float
    dtype), the difference of the first layer's inputs against P. 1 where it is no multiple."""
    get = getattr(model, "get_input_embeddings", None)
    weight = getattr(get() if callable(get) else None, "weight", None)
    names = [n for n, p in model.named_parameters(remove_duplicate=False) if p is weight]
    if weight is None or not names or weight.dim() != 2:
        return 1.0
    g = torch.Generator().manual_seed(0)
    row = (torch.randint(0, 2, (weight.shape[1],), generator=g) * 2 - 1).to(weight)
    seen: list[torch.Tensor] = []

    def grab(_, args, kwargs):
        x = _input_of(args, kwargs)
        if x is not None:
            seen.append(x.detach().float())
        raise _Stop

    hook = first[1].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        for k in (1, 2):
            why = _forward(model, {names[0]: (row * k).expand(weight.shape)})  # tied: one name
            if why:
                failed.append(
                    f"the probe of the embedding's multiplier failed ({why}): {names[0]} gets "
                    "the plain rule (multiplier 1)"
                )
                return 1.0
    finally:
        hook.remove()
    if len(seen) != 2 or seen[0].shape != seen[1].shape or seen[0].shape[-1] != row.numel():
        return 1.0
    diff, p = (seen[1] - seen[0]).reshape(-1, row.numel()), row.float()
    c = (diff @ p).mean().item() / p.numel()
    if not math.isfinite(c) or c <= 0 or (diff - c * p).norm() > 1e-2 * diff.norm():
        return 1.0
    return 1.0 if abs(c - 1) < 1e-3 else c


def _dataflow(model: torch.nn.Module, layers: list, failed: list) -> tuple[frozenset, frozenset]:
    """(post-norms, branch outputs) of the decoder layers, by tensor identity in one forward.
    A post-norm is a layer's direct child norm that takes a non-norm child's output itself
    (OLMo 2's ``post_attention_layernorm(self_attn(x))``; a pre-norm takes the residual
    stream, which no child returned), or a norm inside a non-norm child whose output is that
    child's output (AXK1's ``mlp.post_mlp_layernorm``). A branch output is the last module
    with a 2-D weight run inside a non-norm child whose output has the layer's width
    (GPT-NeoX's and Phi's ``dense``, BERT's ``output.dense``): what the residual gets from
    that branch."""
    outputs: dict[int, torch.Tensor] = {}  # id -> tensor (kept alive so ids stay unique)
    normed: dict[int, tuple[str, torch.Tensor]] = {}  # a branch's inner norms' outputs
    post: set[str] = set()
    last: dict[str, str] = {}  # branch -> its last full-width linear so far
    width: dict[str, int] = {}  # layer -> its input's width
    hooks = []

    def out_hook(_, __, out):
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        if isinstance(first, torch.Tensor):
            outputs[id(first)] = first
            inner = normed.get(id(first))
            if inner is not None and inner[1] is first:
                post.add(inner[0])

    def inner_norm_hook(name):
        def hook(_, __, out):
            if isinstance(out, torch.Tensor):
                normed[id(out)] = (name, out)

        return hook

    def norm_hook(name):
        def hook(_, args, kwargs):
            x = _input_of(args, kwargs)
            if x is not None and outputs.get(id(x)) is x:
                post.add(name)

        return hook

    def layer_hook(prefix):
        def hook(_, args, kwargs):
            x = _input_of(args, kwargs)
            if x is not None and x.dim() >= 1:
                width[prefix] = x.shape[-1]

        return hook

    def linear_hook(prefix, branch, name):
        def hook(_, __, out):
            if isinstance(out, torch.Tensor) and out.dim() >= 1:
                if out.shape[-1] == width.get(prefix):
                    last[branch] = name

        return hook

    def stop(*_):
        raise _Stop

    try:
        for prefix, layer in layers:
            hooks.append(layer.register_forward_pre_hook(layer_hook(prefix), with_kwargs=True))
            for local, child in layer.named_children():
                branch = f"{prefix}.{local}"
                if _is_norm(local, child):
                    hooks.append(
                        child.register_forward_pre_hook(norm_hook(branch), with_kwargs=True)
                    )
                    continue
                hooks.append(child.register_forward_hook(out_hook))
                for sub, m in child.named_modules(prefix=branch):
                    w = getattr(m, "weight", None)
                    if _is_norm(sub, m):
                        hooks.append(m.register_forward_hook(inner_norm_hook(sub)))
                    elif isinstance(w, torch.Tensor) and w.dim() == 2:
                        hooks.append(m.register_forward_hook(linear_hook(prefix, branch, sub)))
        hooks.append(layers[-1][1].register_forward_hook(stop))
        why = _forward(model)
    finally:
        for h in hooks:
            h.remove()
    if why:
        seen = sorted(post) + sorted(set(last.values()) - _by_name(model, layers))
        failed.append(
            f"the probe of the decoder layers' dataflow failed ({why}): their norms and "
            "branch outputs get the plain rule"
            + (f", not what it saw before failing: {', '.join(seen[:8])}" if seen else "")
        )
        return frozenset(), frozenset()
    return frozenset(post), frozenset(last.values())


def _by_name(model: torch.nn.Module, layers: list) -> set:
    """The modules whose weights the plain rule already makes branch outputs (by name)."""
    prefixes = tuple(f"{p}." for p, _ in layers)
    return {
        n for n, _ in model.named_modules()
        if n.startswith(prefixes) and n.rsplit(".", 1)[-1] in RESIDUAL
    }  # fmt: skip


def _shrinks_residual(model: torch.nn.Module, first: tuple, post: frozenset, failed: list) -> bool:
    """Whether the first layer's code multiplies its residual stream by less than 1 (Beam's
    depth-scaled residual add, √((k-1)/k)): its output with every post-norm's output zeroed,
    against its input."""
    seen: list[torch.Tensor] = []
    modules = dict(model.named_modules())
    zero = [modules[n].register_forward_hook(lambda m, a, out: torch.zeros_like(out))
            for n in sorted(post) if n.startswith(first[0] + ".")]  # fmt: skip

    def grab_in(_, args, kwargs):
        x = _input_of(args, kwargs)
        if x is not None:
            seen.append(x.detach().float().clone())

    def grab_out(_, __, out):
        first_out = out[0] if isinstance(out, (tuple, list)) else out
        if isinstance(first_out, torch.Tensor):
            seen.append(first_out.detach().float())
        raise _Stop

    hooks = zero + [first[1].register_forward_pre_hook(grab_in, with_kwargs=True),
                    first[1].register_forward_hook(grab_out)]  # fmt: skip
    try:
        why = _forward(model)
    finally:
        for h in hooks:
            h.remove()
    if why:
        failed.append(
            f"the probe of the first layer's residual failed ({why}): the post-norms "
            f"{', '.join(sorted(post)[:8])} get the plain rule"
        )
        return True  # no post-norm gain: the plain rule
    if len(seen) != 2 or seen[0].shape != seen[1].shape:
        return False
    ratio = (seen[1].norm() / seen[0].norm()).item()
    return math.isfinite(ratio) and ratio < 0.99


def _layer_gains(layers: list) -> frozenset:
    """A layer's own vectors and scalars (not its children's): gains on its residual stream
    or its output (Doge's ``input_residual``, Gemma 4's ``layer_scalar``), filled 1."""
    return frozenset(
        f"{prefix}.{n}"
        for prefix, layer in layers
        for n, t in [*layer.named_parameters(recurse=False), *layer.named_buffers(recurse=False)]
        if t.dim() <= 1 and t.is_floating_point()
    )


def _offsets(model: torch.nn.Module) -> dict[str, float]:
    """c for each norm computing (c + w) * x̂: the norm run with weight 0 and 1 (its other
    1-D tensors 0) on a fixed input; out(0) = c·x̂, out(1) - out(0) = x̂."""
    found = {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if not (_is_norm(name, m) and isinstance(w, torch.Tensor) and w.dim() == 1):
            continue
        x = torch.randn(2, w.numel(), generator=torch.Generator().manual_seed(0)).to(w)
        zeros = {n: torch.zeros_like(t) for n, t in m.named_parameters() if t.dim() == 1}
        try:
            out0 = torch.func.functional_call(m, zeros, (x,)).float()
            out1 = torch.func.functional_call(m, {**zeros, "weight": torch.ones_like(w)}, (x,))
        except Exception:  # a norm taking other inputs (a gate): no offset  # noqa: BLE001
            continue
        if not isinstance(out1, torch.Tensor) or out1.shape != out0.shape:
            continue
        d = out1.float() - out0
        c = ((out0 * d).sum() / (d * d).sum()).item() if d.abs().sum() > 0 else 0.0
        c = round(c * 256) / 256  # the model's dtype rounds: 1 is 1
        if math.isfinite(c) and c != 0:
            found[name] = c
    return found
