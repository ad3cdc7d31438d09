"""The main job: dummy-initialize a small FP8 model with fp8_dummy and with the
reference loop (vLLM's), check that every byte agrees, print times and peak scratch.

The model is one Llama-3-8B-shaped attention block plus MLP slice: FP8 linear weights
(float8_e4m3fn), float32 per-channel weight scales, bfloat16 norms; ~64 M parameters.
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
        self.input_layernorm = torch.nn.LayerNorm(4096, **bf16)
        self.post_attention_layernorm = torch.nn.LayerNorm(4096, **bf16)


def reference_loop(model: torch.nn.Module, low: float, high: float, seed: int) -> None:
    """vLLM's initialize_dummy_weights loop (new path)."""
    for p in model.state_dict().values():
        if torch.is_floating_point(p):
            reference.new_path(p, low, high, seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device = torch.device(args.device)
    ours, theirs = Block(device), Block(device)
    for t in [*ours.state_dict().values(), *theirs.state_dict().values()]:
        t.view(torch.uint8).fill_(0x55)  # touch every page now, so scratch is all we measure
    n = sum(p.numel() for p in ours.state_dict().values())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {device} ({name}), torch {torch.__version__}")
    print(f"model: {n / 1e6:.1f} M parameters, {len(SHAPES)} FP8 linear layers")

    rows = []
    for label, model, fn in (
        ("reference (vLLM loop, new path)", theirs, reference_loop),
        ("fp8_dummy.initialize_dummy_weights", ours, fp8_dummy.initialize_dummy_weights),
    ):
        times = time_calls(lambda i, f=fn, m=model: f(m, -1e-3, 1e-3, 1234), device, args.repeats)
        with peak_scratch(device) as peak:  # after the warm-up: code pages are in by now
            fn(model, -1e-3, 1e-3, 1234)
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
