"""Realistic dummy weights against the engine's dummy path, on billion-parameter-class
models: transformers' LlamaForCausalLM from a Llama-3.2-1B-shaped config (hidden 2048, 16
layers, vocabulary 128,256, tied embeddings: 1.24 B parameters), bfloat16, and an FP8
variant (every decoder linear float8_e4m3fn with DeepSeek-style 128 x 128 float32
``weight_scale_inv`` blocks); and ``moe``: Qwen3-MoE of the same size (the same attention
and vocabulary, 16 experts top-4 of intermediate 512 in each of the 16 layers: 1.25 B
parameters), bfloat16, filled with each routing profile. Built on the meta device, then
``to_empty`` (no init). Timed, medians of --repeats calls after a warm-up:
  vLLM loop    vLLM 0.33's DummyModelLoader as plain torch (tests/oracles/engines.py)
  initialize   fp8_dummy.initialize_dummy_weights(model): vLLM's bytes, our op
  stateless    fp8_dummy.initialize_dummy_weights(model, mode="stateless")
  realistic    fp8_dummy.initialize_realistic_dummy_weights(model)
  zipf:1.2, recorded  (moe) the same with routing="zipf:1.2" / a recorded load's JSON file,
               each call solving its offsets afresh (the in-process cache cleared)
with the peak scratch (CPU: resident high-water mark above the start).

Example:
  python benchmarks/bench_realistic.py --json benchmarks/results/realistic_vm2cpu_<date>.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests"))
import json_out  # noqa: E402
from measure import peak_scratch, summarize, time_calls  # noqa: E402
from oracles.engines import vllm_load_weights  # noqa: E402

import fp8_dummy  # noqa: E402


def build_moe(layers: int) -> torch.nn.Module:
    import transformers as tf

    config = tf.Qwen3MoeConfig(
        vocab_size=128256, hidden_size=2048, num_hidden_layers=layers, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, num_experts=16, num_experts_per_tok=4,
        moe_intermediate_size=512, decoder_sparse_step=1, mlp_only_layers=[],
        tie_word_embeddings=True,
    )  # fmt: skip
    with torch.device("meta"):
        model = tf.Qwen3MoeForCausalLM(config).to(torch.bfloat16)
    model = model.to_empty(device="cpu")
    model.tie_weights()
    return model


def recorded_load(path: Path, layers: int, experts: int, k: int) -> str:
    """A recorded-looking load (lognormal counts, no share above 1/k) as a JSON file."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(layers):
        x = torch.randn(experts, generator=gen, dtype=torch.float64).exp()
        for _ in range(50):  # capped and renormalized until no share is above 0.9/k
            x = (x / x.sum()).clamp(max=0.9 / k)
        rows.append((x / x.sum()).mul(1e6).tolist())
    path.write_text(json.dumps({"expert_load": rows}))
    return str(path)


def cold(routing: str):
    """A fill that solves its routing afresh, as a new process would."""
    from fp8_dummy.realistic.routing.profiles import _canonical

    def fill(model: torch.nn.Module) -> None:
        _canonical.cache_clear()
        fp8_dummy.initialize_realistic_dummy_weights(model, routing=routing)

    return fill


def build(fp8: bool, layers: int) -> torch.nn.Module:
    import transformers as tf

    config = tf.LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(config).to(torch.bfloat16)
        if fp8:
            for m in model.model.layers.modules():
                if isinstance(m, torch.nn.Linear):
                    n, k = m.weight.shape
                    m.weight = torch.nn.Parameter(
                        torch.empty(n, k, dtype=torch.float8_e4m3fn), False
                    )
                    blocks = (math.ceil(n / 128), math.ceil(k / 128))
                    m.weight_scale_inv = torch.nn.Parameter(torch.empty(blocks), False)
    model = model.to_empty(device="cpu")
    model.tie_weights()  # to_empty unties them
    return model


def bench(variant: str, layers: int, repeats: int) -> dict:
    fp8, moe = variant == "fp8", variant == "moe"
    model = build_moe(layers) if moe else build(fp8, layers)
    tensors = list(model.parameters()) + list(model.buffers())  # tied ones once
    label = {"bf16": "Llama-3.2-1B-shaped bf16", "fp8": "Llama-3.2-1B-shaped FP8 block"}
    result = {
        "model": label.get(variant, "Qwen3-MoE 1.2B-shaped bf16 (16 experts top-4)"),
        "parameters": sum(t.numel() for t in tensors),
        "model_bytes": sum(t.numel() * t.element_size() for t in tensors),
    }
    methods = {
        "vLLM loop": lambda: vllm_load_weights(model),
        "initialize": lambda: fp8_dummy.initialize_dummy_weights(model),
        "stateless": lambda: fp8_dummy.initialize_dummy_weights(model, mode="stateless"),
        "realistic": lambda: fp8_dummy.initialize_realistic_dummy_weights(model),
    }
    if moe:
        load = recorded_load(Path(tempfile.mkdtemp()) / "load.json", layers, 16, 4)
        del methods["initialize"], methods["stateless"]
        methods["zipf:1.2"] = lambda: cold("zipf:1.2")(model)
        methods["recorded"] = lambda: cold(load)(model)
    rows = {}
    for name, fn in methods.items():
        times = time_calls(lambda _i, fn=fn: fn(), torch.device("cpu"), repeats)
        with peak_scratch(torch.device("cpu")) as peak:
            fn()
        rows[name] = {**summarize(times), "peak_scratch_bytes": peak.bytes}
        print(f"  {result['model']}: {name} {rows[name]['median_s']:.2f} s", file=sys.stderr)
    result["methods"] = rows
    return result


def print_table(results: list[dict]) -> None:
    for r in results:
        print(
            f"\n{r['model']}: {r['parameters'] / 1e9:.2f} B parameters, "
            f"{r['model_bytes'] / 2**30:.2f} GiB"
        )
        head = f"{'method':<11} {'median s':>9} {'min s':>7} {'GB/s':>6} {'x vLLM':>7}"
        print(f"{head} {'scratch MiB':>12}")
        ref = r["methods"]["vLLM loop"]["median_s"]
        for name, s in r["methods"].items():
            scratch = s["peak_scratch_bytes"]
            text = "n/a" if scratch is None else f"{scratch / 2**20:.1f}"
            print(
                f"{name:<11} {s['median_s']:>9.2f} {s['min_s']:>7.2f} "
                f"{r['model_bytes'] / s['median_s'] / 1e9:>6.2f} {ref / s['median_s']:>7.2f} "
                f"{text:>12}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default="bf16,fp8,moe", help="bf16, fp8, moe")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    json_out.check(parser, args.json)
    variants = args.variants.split(",")
    results = [bench(v, args.layers, args.repeats) for v in variants]
    print_table(results)
    if args.json:
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "platform": platform.platform(),
            "cpu_threads": torch.get_num_threads(),
            "cpu_fast_path": fp8_dummy.cpu_fast_path_info(),
            "layers": args.layers,
        }
        json_out.write(args.json, {"meta": meta, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
