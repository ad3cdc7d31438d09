"""``python -m fp8_dummy routing CONFIG --routing PROFILE [--tokens N] [--ep N] [--seed S]
[--json OUT]``: per MoE layer of a transformers config, the load the realistic fill's routing
gives: the target, the load predicted by the router model (its own selection on N(0, 1)
logits: :func:`.solve.simulate`) and, where the model fits in memory, the load
measured through the real model on random token ids. With ``--ep N``: each of N ranks' share
under the engines' contiguous expert placement. The model is built on the meta device (no
memory) for the plan; only the measurement materializes it."""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import numpy as np
import torch

from ..hf_model import UnplacedTensorError
from ..inplace import initialize_realistic_dummy_weights
from ..reports import common_arguments, common_seed, positive, report_config, write_json
from ..rules import ROUTER
from ..specs import model_specs, model_tensors
from . import offsets, profiles, solve

MEASURE_LIMIT = 2 << 30  # bytes of float32 weights up to which the model is also run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fp8_dummy routing", description=__doc__)
    common_arguments(p)
    p.add_argument("--routing", required=True, help="balanced | zipf:A | a JSON load file")
    p.add_argument("--tokens", type=positive, default=4096, help="tokens (default 4096)")
    p.add_argument("--ep", type=positive, default=None, help="expert-parallel ranks")
    p.add_argument("--measure", choices=("auto", "yes", "no"), default="auto",
                   help="run the model too (auto: its float32 weights fit in 2 GiB)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    # Every argument checked before the model is built (exit status 2, one line each).
    seed = common_seed(parser, args)
    try:
        profile = profiles.parse_routing(args.routing)
    except (profiles.RoutingError, TypeError) as e:
        parser.error(str(e))
    config = report_config(parser, args)
    try:
        report = build_report(config, profile, seed, args.tokens, args.ep, args.measure)
    except (profiles.RoutingError, UnplacedTensorError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(report))
    if args.json is not None:
        write_json(args.json, report)
    return 0


def _model(config: Any, device: str) -> torch.nn.Module:
    import transformers

    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(config).eval()


def _plan(model: torch.nn.Module, profile: profiles.Profile, seed: int, progress: Any = None):
    tensors = model_tensors(model)
    specs = model_specs(model, tensors)
    shapes = {n: tuple(s) for _, n, _, s in tensors}
    config = getattr(model, "config", None)
    if profile.kind == "balanced":  # the plan is empty: the routers with their uniform target
        roles = {n: s.role for n, s in specs.items()}
        routers = offsets.find_routers(roles, shapes, config)
        for r, (pi, b) in zip(routers, profiles.layer_targets(profile, routers, seed)):
            r.target, r.offsets = pi, b
        return routers, tensors
    return offsets.plan_routing(profile, seed, config, specs, shapes, progress)[0], tensors


def _stats(load: np.ndarray, target: np.ndarray, ep: int | None, by_rank: bool) -> dict:
    """max/mean, hot experts, total variation to the target (of sorted shares for zipf)."""
    share, want = load / load.sum(), target / target.sum()
    if by_rank:
        share, want = np.sort(share), np.sort(want)
    out = {
        "max_mean": float(load.max() / load.mean()),
        "hot": [int(e) for e in np.argsort(-load, kind="stable")[:4]],
        "tv": float(0.5 * np.abs(share - want).sum()),
    }
    if ep:
        ranks = np.array_split(load, ep)  # contiguous placement: rank r holds a run of experts
        per = np.array([r.sum() for r in ranks])
        out["ep_max_mean"] = float(per.max() / per.mean())
    return out


class _Bar:
    """A progress line on stderr once the work has taken more than a second."""

    def __init__(self, total: int | None, what: str):
        self.total, self.what, self.start, self.shown = total, what, time.perf_counter(), False

    def step(self, done: int) -> None:
        if time.perf_counter() - self.start > 1:
            self.shown = True
            total = "" if self.total is None else f"/{self.total}"
            print(f"\r[fp8_dummy] {self.what}: {done}{total}", end="", file=sys.stderr)

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr)


def build_report(
    config: Any, profile: profiles.Profile, seed: int, tokens: int, ep: int | None, measure: str
) -> dict:
    meta = _model(config, "meta")
    solving = _Bar(None, "solving the offsets, MoE layers")
    routers, tensors = _plan(meta, profile, seed, solving.step)
    solving.close()
    if not routers:
        raise profiles.RoutingError("the model has no MoE router the realistic fill recognises")
    sizes = sum(math.prod(s) * 4 for _, _, _, s in tensors)
    run = measure == "yes" or (measure == "auto" and sizes <= MEASURE_LIMIT)
    zipf = profile.kind == "zipf"
    layers = []
    bar = _Bar(len(routers), "predicting")
    shapes = {n: s for _, n, _, s in tensors}
    for i, r in enumerate(routers):
        if r.realize == "hash":  # the table's own rows, every id drawn equally often
            vocab = int(shapes[r.bias][0])
            table = offsets.hash_table(r.target, vocab, r.top_k, 0)
            predicted = np.bincount(table.ravel(), minlength=r.experts) * (tokens / vocab)
        else:
            predicted = solve.simulate(r, r.offsets, tokens, key=(seed + 1) % (1 << 64)) * tokens
        layers.append({
            "layer": r.layer, "router": r.weight, "experts": r.experts, "top_k": r.top_k,
            "kind": solve.describe(r), "target": _stats(r.target, r.target, ep, zipf),
            "predicted": _stats(predicted, r.target, ep, zipf),
        })  # fmt: skip
        bar.step(i + 1)
    bar.close()
    if run:
        loads = measured_loads(config, profile, seed, tokens, routers)
        for entry, r, load in zip(layers, routers, loads):
            entry["measured"] = _stats(load, r.target, ep, zipf)
    return {"routing": profile.source, "seed": seed, "tokens": tokens, "ep": ep,
            "measured": run, "layers": layers}  # fmt: skip


def measured_loads(config, profile, seed, tokens, routers) -> list[np.ndarray]:
    """Each router's own choice through the whole model, on ``tokens`` random token ids."""
    model = _model(config, "cpu").float()
    initialize_realistic_dummy_weights(model, seed, routing=profile)
    modules = dict(model.named_modules())
    counts = {r.weight: np.zeros(r.experts) for r in routers}

    def hook(r: solve.Router):
        def record(_m, _i, out):  # the router's own top-k: its integer output, k per token
            outs = out if isinstance(out, (tuple, list)) else (out,)
            count = next((o for o in outs if isinstance(o, list) and len(o) == r.experts), None)
            if count is not None:  # its own count per expert (JetMoE's router returns it)
                counts[r.weight] += np.asarray(count)
                return
            picked = next(o for o in outs if torch.is_tensor(o) and not o.is_floating_point()
                          and o.dim() and o.shape[-1] == r.top_k)  # fmt: skip
            counts[r.weight] += np.bincount(picked.flatten().numpy(), minlength=r.experts)

        return record

    hooks = [modules[_router_module(r.weight)].register_forward_hook(hook(r)) for r in routers]
    vocab = int(getattr(config, "vocab_size", None) or config.get_text_config().vocab_size)
    gen = torch.Generator().manual_seed(seed)
    seq = 256
    bar = _Bar(math.ceil(tokens / seq), "measuring")
    try:
        with torch.no_grad():
            for i, start in enumerate(range(0, tokens, seq)):
                ids = torch.randint(0, vocab, (1, min(seq, tokens - start)), generator=gen)
                model(ids)
                bar.step(i + 1)
    finally:
        bar.close()
        for h in hooks:
            h.remove()
    return [counts[r.weight] for r in routers]


def _router_module(weight: str) -> str:
    """The router module of a router weight: the nearest module named ``gate``/``router`` that
    holds it (JetMoE's ``router``, whose ``layer`` returns logits only)."""
    parts = weight.split(".")[:-1]
    for end in range(len(parts), 0, -1):
        if parts[end - 1] in ROUTER:
            return ".".join(parts[:end])
    return ".".join(parts)


def render(report: dict) -> str:
    ep = report["ep"]
    head = f"{'layer':>5} {'E':>4} {'k':>2} {'kind':<24} {'target':>7} {'pred.':>7} {'TV':>6}"
    if report["measured"]:
        head += f" {'meas.':>7} {'TV':>6}"
    if ep:
        head += f" {'EP' + str(ep) + ' pred.':>10}"
    head += "  hot experts (predicted)"
    lines = [
        f"routing {report['routing']}, seed {report['seed']}, {report['tokens']} tokens; "
        "max/mean load per layer (predicted: the router model's own selection)",
        head,
    ]
    for e in report["layers"]:
        line = (
            f"{e['layer']:>5} {e['experts']:>4} {e['top_k']:>2} {e['kind']:<24} "
            f"{e['target']['max_mean']:>7.2f} {e['predicted']['max_mean']:>7.2f} "
            f"{e['predicted']['tv']:>6.3f}"
        )
        if "measured" in e:
            line += f" {e['measured']['max_mean']:>7.2f} {e['measured']['tv']:>6.3f}"
        if ep:
            line += f" {e['predicted']['ep_max_mean']:>10.2f}"
        lines.append(line + "  " + " ".join(map(str, e["predicted"]["hot"])))
    return "\n".join(lines)
