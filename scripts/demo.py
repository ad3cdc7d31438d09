"""The main job: dummy-initialize a small FP8 model with fp8_dummy and with the
reference loop (vLLM's), check that every byte agrees, print times and peak scratch.

The model is one Llama-3-8B-shaped attention block plus an MLP slice: FP8 linear weights
(float8_e4m3fn), float32 per-channel weight scales, bfloat16 norms and a bfloat16
embedding slice (4096 tokens); ~82 M parameters.

By default both sides follow vLLM 0.33's dummy loader, so the numbers are the ones a vLLM
user sees: FP8 weights uniform in ±1.0, wider floats in ±1e-3. ``--semantics vllm-0.30``
(vLLM 0.28-0.32) or ``sglang-0.5`` (SGLang 0.5.23) draw FP8 weights in ±1e-3 instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from measure import peak_scratch, summarize, time_calls  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy import reference  # noqa: E402

SHAPES = {  # (out_features, in_features)
    "q_proj": (4096, 4096),
    "k_proj": (1024, 4096),
    "v_proj": (1024, 4096),
    "o_proj": (4096, 4096),
    "down_proj": (4096, 5632),
}


class FP8Linear(torch.nn.Module):
    def __init__(self, out_features: int, in_features: int, device: torch.device):
        super().__init__()
        w = torch.empty(out_features, in_features, dtype=torch.float8_e4m3fn, device=device)
        self.weight = torch.nn.Parameter(w, requires_grad=False)
        self.weight_scale = torch.nn.Parameter(
            torch.empty(out_features, 1, dtype=torch.float32, device=device), requires_grad=False
        )


class Block(torch.nn.Module):
    def __init__(self, device: torch.device):
        super().__init__()
        for name, shape in SHAPES.items():
            self.add_module(name, FP8Linear(*shape, device=device))
        bf16 = {"dtype": torch.bfloat16, "device": device}
        self.embed_tokens = torch.nn.Embedding(4096, 4096, **bf16)
        self.input_layernorm = torch.nn.LayerNorm(4096, **bf16)
        self.post_attention_layernorm = torch.nn.LayerNorm(4096, **bf16)


def reference_loop(model: torch.nn.Module, semantics: str, seed: int) -> None:
    """The engine's loop in plain PyTorch, for this model's tensor kinds (floats; no scale
    names SGLang treats specially): a fresh generator per tensor; vLLM 0.33 draws 8-bit
    floats in ±1.0 and the rest in ±1e-3, the older engines everything in ±1e-3."""
    path = reference.old_path if semantics == "sglang-0.5" else reference.new_path
    for p in model.state_dict().values():
        if torch.is_floating_point(p):
            r = 1.0 if semantics == "vllm-0.33" and p.element_size() == 1 else 1e-3
            path(p, -r, r, seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--semantics", default="vllm-0.33", choices=fp8_dummy.SEMANTICS)
    args = parser.parse_args()
    device = torch.device(args.device)
    ours, theirs = Block(device), Block(device)
    for t in [*ours.state_dict().values(), *theirs.state_dict().values()]:
        t.view(torch.uint8).fill_(0x55)  # touch every page now, so scratch is all we measure
    n = sum(p.numel() for p in ours.state_dict().values())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {device} ({name}), torch {torch.__version__}")
    print(f"model: {n / 1e6:.1f} M parameters, {len(SHAPES)} FP8 linear layers")
    fp8_range = "±1.0" if args.semantics == "vllm-0.33" else "±1e-3"
    print(f"semantics: {args.semantics} (FP8 weights in {fp8_range}, wider floats in ±1e-3)")

    def ref(m: torch.nn.Module) -> None:
        reference_loop(m, args.semantics, 1234)

    def fused(m: torch.nn.Module) -> None:
        fp8_dummy.initialize_dummy_weights(m, seed=1234, semantics=args.semantics)

    rows = []
    for label, model, fn in (
        (f"reference ({args.semantics} loop)", theirs, ref),
        ("fp8_dummy.initialize_dummy_weights", ours, fused),
    ):
        times = time_calls(lambda i, f=fn, m=model: f(m), device, args.repeats)
        with peak_scratch(device) as peak:  # after the warm-up: code pages are in by now
            fn(model)
        rows.append((label, summarize(times)["median_s"], peak.bytes))

    mismatched = [
        name
        for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values())
        if not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    ]
    for label, median, scratch in rows:
        mib = "n/a" if scratch is None else f"{scratch / 2**20:8.1f} MiB"
        print(f"  {label:38s} median {median * 1e3:9.2f} ms   peak scratch {mib}")
    print(f"  speedup: {rows[0][1] / rows[1][1]:.2f}x")
    if mismatched:
        print(f"BYTES DIFFER in {len(mismatched)} tensors: {mismatched}")
        return 1
    print(f"bytes: identical in all {len(ours.state_dict())} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
