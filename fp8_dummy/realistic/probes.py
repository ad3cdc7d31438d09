"""The probes behind :func:`.arch.derive`: forwards of the model on a few token ids with hooks
that record its dataflow (which norms take a branch's output, which linear ends each branch),
the embedding lookup's multiplier and a layer's own gains (each norm's offset: :mod:`.offsets`).
Nothing is written: parameters are substituted through ``torch.func.functional_call`` or read."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from .rules import RESIDUAL

__all__ = ["Stop", "by_name", "dataflow", "decoder_layers", "embed_scale", "forward"]
__all__ += ["input_of", "is_norm", "layer_gains", "shrinks_residual", "stand_ins"]

_TOKENS = 8


class Stop(Exception):
    """Raised by a hook to end a probe's forward early."""


def is_norm(name: str, module: torch.nn.Module) -> bool:
    """The rule's norm test (:func:`.rules.tensor_spec`: a norm class, or a module named
    ``*norm*``) on a module without matrices (``RobertaPreLayerNormAttention`` is no norm)."""
    norm_class = "Norm" in type(module).__name__
    norm_class |= isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm))
    if any(p.dim() >= 2 for p in module.parameters()):
        return False
    return norm_class or "norm" in name.rsplit(".", 1)[-1]


def decoder_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The longest ``ModuleList`` named ``layers``, ``h`` or ``blocks``: (full name, layer)."""
    best: list = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in (
            "layers", "h", "blocks", "layer",
        ):  # fmt: skip
            if len(m) > len(best):
                best = [(f"{name}.{i}", child) for i, child in enumerate(m)]
    return best


def forward(model: torch.nn.Module, params: Mapping[str, torch.Tensor] | None = None) -> str:
    """The model on 8 token ids, with ``params`` substituted (nothing written), until a hook's
    :class:`Stop` or the end: "", or why it failed (the probe then gets the plain rule's
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
        except Stop:
            return ""
        except TypeError as e:  # use_cache not taken: without it
            why = f"TypeError: {e}"
            continue
        except Exception as e:  # noqa: BLE001 (a probe never raises: the plain rule instead)
            return f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return ""
    return why.splitlines()[0][:300]


def stand_ins(blocks: list) -> dict[str, torch.Tensor]:
    """The parameters of ``blocks`` ((prefix, module) pairs: a probe's MoE blocks) by values
    that do not depend on what the model holds (a poisoned or filled model gives the same
    facts), in float32 whatever the model's dtype:
    matrices N(0, 1/fan-in), a stack of them (experts) one matrix repeated as a view (no memory
    per expert), vectors and scalars 1 (gains), biases 0."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for prefix, block in blocks:
        for name, p in block.named_parameters(prefix=prefix):
            if not p.is_floating_point():
                continue
            if p.dim() >= 2:
                t = (torch.randn(p.shape[-2:], generator=g) * p.shape[-1] ** -0.5).expand(p.shape)
            else:
                t = torch.full(p.shape, 0.0 if name.endswith("bias") else 1.0)
            out[name] = t.to(device=p.device)  # float32: the sums exact to 1e-6 in any dtype
    return out


def input_of(args: tuple, kwargs: dict):
    x = args[0] if args else kwargs.get("hidden_states")
    return x if isinstance(x, torch.Tensor) else None


def embed_scale(model: torch.nn.Module, first: tuple[str, torch.nn.Module], failed: list) -> float:
    """c where the first layer's input is c x the embedding lookup plus what does not depend
    on it (positions): the lookup with every row P, 2P and 3P (P = ±1, exact in any float
    dtype), the differences of the first layer's inputs against P, which a multiple makes
    equal. 1 where it is no multiple (a normalized lookup, Inkling's: its inputs differ by
    the norm's epsilon alone, unequally)."""
    get = getattr(model, "get_input_embeddings", None)
    weight = getattr(get() if callable(get) else None, "weight", None)
    names = [n for n, p in model.named_parameters(remove_duplicate=False) if p is weight]
    if weight is None or not names or weight.dim() != 2:
        return 1.0
    g = torch.Generator().manual_seed(0)
    row = (torch.randint(0, 2, (weight.shape[1],), generator=g) * 2 - 1).to(weight)
    seen: list[torch.Tensor] = []

    def grab(_, args, kwargs):
        x = input_of(args, kwargs)
        if x is not None:
            seen.append(x.detach().float())
        raise Stop

    hook = first[1].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        for k in (1, 2, 3):
            why = forward(model, {names[0]: (row * k).expand(weight.shape)})  # tied: one name
            if why:
                failed.append(
                    f"the probe of the embedding's multiplier failed ({why}): {names[0]} gets "
                    "the plain rule (multiplier 1)"
                )
                return 1.0
    finally:
        hook.remove()
    if len(seen) != 3 or len({s.shape for s in seen}) != 1 or seen[0].shape[-1] != row.numel():
        return 1.0
    diff, p = (seen[1] - seen[0]).reshape(-1, row.numel()), row.float()
    more = (seen[2] - seen[1]).reshape(-1, row.numel())
    c = (diff @ p).mean().item() / p.numel()
    if not math.isfinite(c) or c <= 0 or (diff - c * p).norm() > 1e-2 * diff.norm():
        return 1.0
    if (more - diff).norm() > 1e-2 * diff.norm():
        return 1.0
    return 1.0 if abs(c - 1) < 1e-3 else c


def dataflow(model: torch.nn.Module, layers: list, failed: list) -> tuple[frozenset, frozenset]:
    """(post-norms, branch outputs) of the decoder layers, by tensor identity in one forward.
    A post-norm is a layer's direct child norm that takes a non-norm child's output itself
    (OLMo 2's ``post_attention_layernorm(self_attn(x))``; a pre-norm takes the residual
    stream, which no child returned), or a norm inside a non-norm child whose output is that
    child's output (AXK1's ``mlp.post_mlp_layernorm``). A branch output is the last module
    with a weight of two dimensions or more (not a convolution's) run inside a non-norm child
    whose output has the layer's width (GPT-NeoX's and Phi's ``dense``, BERT's
    ``output.dense``, JetMoE's experts' ``output_linear`` [E, out, in], which its attention
    runs after its ``kv_proj``): what the residual gets from that branch."""
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
            x = input_of(args, kwargs)
            if x is not None and outputs.get(id(x)) is x:
                post.add(name)

        return hook

    def layer_hook(prefix):
        def hook(_, args, kwargs):
            x = input_of(args, kwargs)
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
        raise Stop

    try:
        for prefix, layer in layers:
            hooks.append(layer.register_forward_pre_hook(layer_hook(prefix), with_kwargs=True))
            for local, child in layer.named_children():
                branch = f"{prefix}.{local}"
                if is_norm(local, child):
                    hooks.append(
                        child.register_forward_pre_hook(norm_hook(branch), with_kwargs=True)
                    )
                    continue
                hooks.append(child.register_forward_hook(out_hook))
                for sub, m in child.named_modules(prefix=branch):
                    w = getattr(m, "weight", None)
                    if is_norm(sub, m):
                        hooks.append(m.register_forward_hook(inner_norm_hook(sub)))
                    elif isinstance(w, torch.Tensor) and w.dim() >= 2 and not _conv(m):
                        hooks.append(m.register_forward_hook(linear_hook(prefix, branch, sub)))
        hooks.append(layers[-1][1].register_forward_hook(stop))
        why = forward(model)
    finally:
        for h in hooks:
            h.remove()
    if why:
        seen = sorted(post) + sorted(set(last.values()) - by_name(model, layers))
        failed.append(
            f"the probe of the decoder layers' dataflow failed ({why}): their norms and "
            "branch outputs get the plain rule"
            + (f", not what it saw before failing: {', '.join(seen[:8])}" if seen else "")
        )
        return frozenset(), frozenset()
    return frozenset(post), frozenset(last.values())


def _conv(module: torch.nn.Module) -> bool:
    """A convolution (``nn.Conv*d``): its output's last dimension is a length, not a width."""
    return isinstance(module, torch.nn.modules.conv._ConvNd)


def by_name(model: torch.nn.Module, layers: list) -> set:
    """The modules whose weights the plain rule already makes branch outputs (by name)."""
    prefixes = tuple(f"{p}." for p, _ in layers)
    return {
        n for n, _ in model.named_modules()
        if n.startswith(prefixes) and n.rsplit(".", 1)[-1] in RESIDUAL
    }  # fmt: skip


def shrinks_residual(model: torch.nn.Module, first: tuple, post: frozenset, failed: list) -> bool:
    """Whether the first layer's code multiplies its residual stream by less than 1 (Beam's
    depth-scaled residual add, √((k-1)/k)): its output with every post-norm's output zeroed,
    against its input."""
    seen: list[torch.Tensor] = []
    modules = dict(model.named_modules())
    zero = [modules[n].register_forward_hook(lambda m, a, out: torch.zeros_like(out))
            for n in sorted(post) if n.startswith(first[0] + ".")]  # fmt: skip

    def grab_in(_, args, kwargs):
        x = input_of(args, kwargs)
        if x is not None:
            seen.append(x.detach().float().clone())

    def grab_out(_, __, out):
        first_out = out[0] if isinstance(out, (tuple, list)) else out
        if isinstance(first_out, torch.Tensor):
            seen.append(first_out.detach().float())
        raise Stop

    hooks = zero + [first[1].register_forward_pre_hook(grab_in, with_kwargs=True),
                    first[1].register_forward_hook(grab_out)]  # fmt: skip
    try:
        why = forward(model)
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


def layer_gains(layers: list) -> frozenset:
    """A layer's own vectors and scalars (not its children's): gains on its residual stream
    or its output (Doge's ``input_residual``, Gemma 4's ``layer_scalar``), filled 1."""
    return frozenset(
        f"{prefix}.{n}"
        for prefix, layer in layers
        for n, t in [*layer.named_parameters(recurse=False), *layer.named_buffers(recurse=False)]
        if t.dim() <= 1 and t.is_floating_point()
    )
