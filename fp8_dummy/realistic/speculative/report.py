"""``python -m fp8_dummy acceptance CONFIG --acceptance A [--k K ...] [--seed S] [--json OUT]``:
what the designed stream of a transformers config gives (docs/realistic.md#speculative-
decoding): the MTP layers its checkpoint carries, the stream's tokens, the acceptance an engine
drafting k tokens per step measures under greedy decoding, per position (given the position
before was accepted, and of all steps: vLLM's per-position rate) and the mean acceptance
length, and the next-token distribution's entropy at temperature 1 for final residuals of RMS
1.0 to 1.4. The model is built on the meta device: nothing is materialized but the codes."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from ..kept import config_checkpoint
from ..reports import common_arguments, common_seed, positive, report_config, write_json
from .acceptance import AcceptanceError, parse_acceptance
from .design import RHO, DesignError, code_block, predicted_entropy
from .mtp_layouts import mtp_layers, mtp_prefixes
from .stream import predict

RHOS = (1.0, 1.2, 1.4)  # a plain stack's final residual RMS, its middle the design's RHO


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fp8_dummy acceptance", description=__doc__)
    common_arguments(p)
    p.add_argument("--acceptance", type=_acceptance, default="default",
                   help="A, A1,A2,... or default (0.85)")  # fmt: skip
    p.add_argument(
        "--k", type=positive, action="append", default=None,
        help="draft tokens per step (repeatable; default: 1 to 3 and the list's length)",
    )  # fmt: skip
    return p


def _acceptance(text: str):
    try:
        acceptance = parse_acceptance(text)
    except AcceptanceError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if acceptance is None:
        raise argparse.ArgumentTypeError(f"{text!r}: there is no designed stream to report")
    return acceptance


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    seed = common_seed(parser, args)
    acceptance = args.acceptance
    config = report_config(parser, args)
    try:
        lm = config_checkpoint(config, seed, acceptance=acceptance)
    except (DesignError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ks = args.k or sorted({1, 2, 3, *([acceptance.positions] if acceptance.positions else [])})
    report = build_report(lm, config, ks)
    print(render(report))
    if args.json is not None:
        write_json(args.json, report)
    return 0


def build_report(lm: Any, config: Any, ks: list[int]) -> dict:
    facts = lm.speculative
    stream, acceptance = facts["stream"], facts["acceptance"]
    style, layers = mtp_layers(config)
    prefixes = mtp_prefixes(config)
    embed = lm.tensors[facts["embedding"]]
    codes = code_block(embed.spec, embed.key, embed.shape, embed.dtype, facts["codes"])
    entropy = {}
    # where the class's structure sets the code's coefficient (code_gain.py), 1/ρ is it
    for rho in (r * facts["rho"] / RHO for r in RHOS):
        h, top = predicted_entropy(codes, stream, facts["scale"], rho)
        entropy[f"{rho:.3g}"] = {"min": float(h.min()), "mean": float(h.mean()),
                               "max": float(h.max()), "top1": float(top.mean())}  # fmt: skip
    per_k = []
    for k in ks:
        p = predict(stream.right, k)
        p["acceptance_length"] = 1.0 + p["mean_accepted"]
        per_k.append(p)
    return {
        "acceptance": acceptance.source, "memoryless": acceptance.memoryless,
        "rates": list(acceptance.rates), "seed": lm.seed, "vocab": stream.vocab,
        "stream_tokens": int(stream.order.size), "tokens": stream.tokens,
        "mtp": {"style": style, "layers": layers,
                "tensors": sorted(n for n in lm.tensors if n.startswith(prefixes))},
        "d": facts["d"], "reserved": [facts["codes"].start, facts["codes"].stop],
        "scale": facts["scale"], "ln_vocab": math.log(stream.vocab), "entropy": entropy,
        "predicted": per_k,
    }  # fmt: skip


def render(report: dict) -> str:
    lines = [
        f"acceptance {report['acceptance']} "
        f"({'memoryless' if report['memoryless'] else 'per position'}), seed {report['seed']}",
        f"stream: {report['stream_tokens']} of {report['vocab']} tokens ({report['tokens']})",
        f"MTP layers: {report['mtp']['layers']} ({report['mtp']['style'] or 'none'}, "
        f"{len(report['mtp']['tensors'])} tensors)",
        f"code subspace: {report['d']} dims [{report['reserved'][0]}, {report['reserved'][1]}), "
        f"lm_head scale {report['scale']:g}",
        "next-token entropy at temperature 1 (nats; 1 to "
        f"{0.8 * report['ln_vocab']:.2f} is 1 nat to 80% of ln V), by ρ, 1 / the code's "
        "coefficient at the lm_head's input (a plain stack's final residual RMS):",
    ]
    for rho, e in report["entropy"].items():
        lines.append(
            f"  ρ {rho}: {e['min']:.2f} to {e['max']:.2f} (mean {e['mean']:.2f}), "
            f"top-1 probability {e['top1']:.2f}"
        )
    lines.append("greedy acceptance an engine drafting k tokens per step measures:")
    lines.append(f"  {'k':>2} {'per position (given the one before)':<40} "
                 f"{'per position (of all steps)':<36} length")  # fmt: skip
    for p in report["predicted"]:
        cond = " ".join(f"{x:.3f}" for x in p["conditional"])
        per = " ".join(f"{x:.3f}" for x in p["per_step"])
        lines.append(f"  {p['k']:>2} {cond:<40} {per:<36} {p['acceptance_length']:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
