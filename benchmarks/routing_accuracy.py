"""The routing profiles' accuracy through transformers' own MoE classes (docs/realistic.md,
Routing): per model and profile, the target's max/mean, the measured max/mean over the MoE
layers, the worst layer's total variation to the target (sorted for zipf), the residual RMS.
The models and the measurement are tests/test_realistic_routing.py's; the default sizes first,
then sizes not used in development. Prints markdown rows.

  python benchmarks/routing_accuracy.py [ARCH,ARCH...]   (default: every one, then the sizes)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_realistic_routing as T  # noqa: E402

import fp8_dummy  # noqa: E402

OTHER_SIZES = [
    ("qwen3_moe", dict(h=128, experts=32, k=4, layers=4), 1.0),
    ("mixtral", dict(h=96, experts=16, k=2, layers=2), 0.8),
    ("deepseek_v3", dict(h=128, experts=128, k=6, layers=3), 1.0),
    ("gpt_oss", dict(h=64, experts=32, k=4, layers=2), 1.5),
    ("olmoe", dict(h=256, experts=64, k=8, layers=2), 1.0),
]


def row(arch: str, kw: dict, alpha: float, profile: str) -> str:
    model = T.build(arch, **kw)
    fp8_dummy.initialize_realistic_dummy_weights(model, 0, routing=profile)
    k = T.top_k(model.config)
    m = T.measure(model, 0)
    experts = len(m["loads"][0])
    zipf = profile != "balanced"
    target = T.zipf_oracle(experts, k, alpha) if zipf else np.full(experts, k / experts)
    tvs = [T.tv_sorted(a, target) for a in m["loads"]]
    ratio = [a.max() / a.mean() for a in m["loads"]]
    return (
        f"| {arch} | {T.KIND[arch]} | {kw.get('h', 64)} | {experts} | {k} | {profile} | "
        f"{target.max() / target.mean():.2f} | {min(ratio):.2f}-{max(ratio):.2f} | "
        f"{max(tvs):.3f} | {min(m['rms']):.2f}-{max(m['rms']):.2f} |"
    )


def main() -> int:
    print("| model | router | hidden | E | k | routing | target max/mean | measured max/mean "
          "| worst TV | residual RMS |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    chosen = sys.argv[1].split(",") if len(sys.argv) > 1 else None
    runs = [(a, {}, 1.2) for a in T.KIND] + ([] if chosen else OTHER_SIZES)
    for arch, kw, alpha in [r for r in runs if chosen is None or r[0] in chosen]:
        for profile in (f"zipf:{alpha}", "balanced"):
            print(row(arch, kw, alpha, profile), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
