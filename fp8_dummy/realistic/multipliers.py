"""The probe of a constant m that a model's code multiplies an inner norm's output by before
the linear that reads it (LongCat-Flash's MLA: its KV latent's norm times √(hidden /
kv_lora_rank), ``mla_scale_kv_lora``; vLLM and SGLang fold the same factor into that norm's
weight as they load it), found by a forward of the model, never by a config key. The rule
gives that norm's weight 1/m (:meth:`.arch.Arch.norm_value`): the linear reads a unit-RMS
input, as in a plain model, and the branch adds what the rule assumes
(docs/realistic.md#the-rule-per-architecture)."""

from __future__ import annotations

import torch

from .probes import Stop, forward, input_of, is_norm, stand_ins

__all__ = ["norm_multipliers"]

_GRID = 1024  # m rounded to 1/1024: the same m from any run (√4 = 2 exact)
_EPS = 4  # the input is the output times m to this many of its dtype's epsilons


def _inner_norms(prefix: str, layer: torch.nn.Module) -> list[str]:
    """The names (relative to the layer) of the norms with a 1-D weight inside a decoder
    layer's children (a branch's own: MLA's ``q_a_layernorm``, ``kv_a_layernorm``), not the
    layer's own pre- and post-norms."""
    direct = {id(m) for m in layer.children()}
    found = []
    for name, m in layer.named_modules():
        w = getattr(m, "weight", None)
        if not name or id(m) in direct or not is_norm(f"{prefix}.{name}", m):
            continue
        if isinstance(w, torch.Tensor) and w.dim() == 1:
            found.append(name)
    return found


def _ratio(out: torch.Tensor, x: torch.Tensor) -> float | None:
    """m where ``x`` is ``out`` times m element by element (to ``x``'s rounding), else None."""
    if x.numel() != out.numel() or not x.is_floating_point():
        return None
    a, b = out.detach().reshape(-1).double(), x.detach().reshape(-1).double()
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return None
    aa = (a * a).sum()
    if aa == 0:
        return None
    m = ((a * b).sum() / aa).item()
    tol = _EPS * torch.finfo(x.dtype).eps * abs(m) * a.abs().max().item()
    return m if m > 0 and (b - m * a).abs().max().item() <= tol else None


def _probe_layer(model, prefix: str, layer, norms: list[str], dtype) -> tuple[dict, str]:
    """(relative norm name -> m, why the forward failed or ""), from one forward stopped after
    ``layer``, which runs in ``dtype`` on a fixed random input with :func:`.probes.stand_ins`
    parameters (what the model holds is neither read nor written; a gate computed from them
    varies, so only a constant factor of the code is found): each norm's m where every linear
    input of the output's size that is the output times a constant is it times the same
    m != 1."""
    modules = dict(layer.named_modules())
    outs: dict[str, torch.Tensor] = {}
    ins: list[torch.Tensor] = []

    def on_norm(name):
        def hook(_, __, out):
            if isinstance(out, torch.Tensor):
                outs.setdefault(name, out)

        return hook

    def on_linear(_, args):
        if args and isinstance(args[0], torch.Tensor):
            ins.append(args[0])

    def on_layer(_, args, kwargs):  # the layer's input: in ``dtype``, whatever came before
        x = input_of(args, kwargs)
        if x is None:
            return None
        g = torch.Generator().manual_seed(1)
        x = torch.randn(x.shape, generator=g).to(device=x.device, dtype=dtype)
        if args:
            return (x, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": x}

    def stop(*_):
        raise Stop

    hooks = [layer.register_forward_pre_hook(on_layer, with_kwargs=True)]
    hooks.append(layer.register_forward_hook(stop))
    hooks += [modules[n].register_forward_hook(on_norm(n)) for n in norms]
    hooks += [m.register_forward_pre_hook(on_linear) for m in layer.modules()
              if isinstance(m, torch.nn.Linear)]  # fmt: skip
    try:
        params = {n: t.to(dtype) for n, t in stand_ins([(prefix, layer)]).items()}
        why = forward(model, params)
    finally:
        for h in hooks:
            h.remove()
    if why:
        return {}, why
    found = {}
    for name, out in outs.items():
        grid = {round(m * _GRID) / _GRID for m in map(lambda x: _ratio(out, x), ins) if m}
        if len(grid) == 1 and (m := grid.pop()) != 1:
            found[name] = m
    return found, ""


def norm_multipliers(model: torch.nn.Module, layers: list, failed: list) -> dict[str, float]:
    """Norm module name -> m for each inner norm whose output the code multiplies by m != 1
    before a linear reads it: the first decoder layer of each structure (its class and inner
    norms) probed (:func:`_probe_layer`) in float32, else (a model whose code mixes dtypes
    badly: HY-V4's in bfloat16) in its own dtype, its facts given to the layers of its
    structure."""
    probed: dict[tuple, dict[str, float]] = {}
    found = {}
    for prefix, layer in layers:
        norms = _inner_norms(prefix, layer)
        if not norms:
            continue
        kind = (type(layer), tuple((n, type(layer.get_submodule(n))) for n in norms))
        if kind not in probed:
            own = next((p.dtype for p in layer.parameters() if p.is_floating_point()), None)
            for dtype in dict.fromkeys((torch.float32, own or torch.float32)):
                probed[kind], why = _probe_layer(model, prefix, layer, norms, dtype)
                if not why:
                    break
            else:
                failed.append(f"the probe of the multipliers of inner norms' outputs failed "
                              f"({why}): their norms get the plain rule")  # fmt: skip
        found.update({f"{prefix}.{n}": m for n, m in probed[kind].items()})
    return found
