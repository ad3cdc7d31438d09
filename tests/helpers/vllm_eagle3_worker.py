"""One of the two gloo processes of tests/test_engines_vllm_eagle3.py: the EAGLE-3 draft that
``export --draft-layout eagle3`` wrote, built by vLLM 0.33 as its proposer builds it (the
exported target's ``ModelConfig``, a ``SpeculativeConfig`` of method ``eagle3`` naming the
draft's folder, the loader's ``create_model`` with the draft's model config: vLLM's
``Eagle3LlamaForCausalLM``), poisoned, then loaded by vLLM's own safetensors loader at TP=1
(rank 0) and TP=2. The oracle: the export's tensors read with the safetensors library and
placed as vLLM 0.33's parallel layers place a checkpoint (its linear and vocabulary layers:
q/k/v and gate/up stacked per rank, o/down columns, vocabulary rows padded to 64, ``fc``
replicated). Findings go to OUT/<rank>.json as {"1": ..., "2": ...}."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path


def _run(rank: int, port: int, out: Path) -> dict:
    from vllm.config import set_current_vllm_config
    from vllm.distributed import initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel

    from helpers import vllm_invariant_models as M

    base = M.start(rank, port, str(out))
    folder = out / "export"
    if rank == 0:
        export(folder)
    found: dict = {}
    _barrier()
    if rank == 0:
        found["1"] = _case(M, folder, 1, 0)
    destroy_model_parallel()
    with set_current_vllm_config(base):
        initialize_model_parallel(tensor_model_parallel_size=2)
    found["2"] = _case(M, folder, 2, rank)
    return found


def _barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


# A Llama target of four layers (the auxiliary layers 2, 2, 1), its EAGLE-3 draft of width 512
# (eight heads of 64, two KV heads: split at TP=2), the vocabulary a multiple of 128.
TARGET = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=128,
    intermediate_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=32, vocab_size=1024, max_position_embeddings=256, rms_norm_eps=1e-6,
    torch_dtype="bfloat16", tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
)  # fmt: skip


def export(folder: Path, hidden: int | None = 512) -> None:
    """The target (TARGET) exported with acceptance 0.6 and its EAGLE-3 draft of width
    ``hidden`` (None: the export's default)."""
    import json

    from fp8_dummy.realistic.export import main

    source = folder / "source"
    source.mkdir(parents=True, exist_ok=True)
    (source / "config.json").write_text(json.dumps(TARGET))
    args = [str(source), str(folder / "target"), "--acceptance", "0.6", "--quiet"]
    args += ["--draft", str(folder / "draft"), "--draft-layout", "eagle3"]
    args += [] if hidden is None else ["--draft-hidden", str(hidden)]
    assert main(args) == 0


def expected(folder: Path, world: int, rank: int) -> dict:
    """vLLM's parameters (their names) as its parallel layers place the export's tensors."""
    import json

    import torch
    from safetensors.torch import load_file

    t: dict = {}
    for f in sorted((folder / "draft").glob("*.safetensors")):
        t.update(load_file(str(f)))
    c = json.loads((folder / "draft" / "config.json").read_text())
    hd, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]

    def rows(x: torch.Tensor, parts: int = world) -> torch.Tensor:
        return x.chunk(parts, 0)[rank]

    def cols(x: torch.Tensor) -> torch.Tensor:
        return x.chunk(world, 1)[rank]

    def vocab(x: torch.Tensor) -> torch.Tensor:
        padded = -(-x.shape[0] // 64) * 64
        full = torch.zeros(padded, x.shape[1], dtype=x.dtype)
        full[: x.shape[0]] = x
        return rows(full)

    p, m = "midlayer.", "model.layers.0."  # the module's index (its attention's prefix is L)
    kv = rank // max(1, world // nkv) if nkv < world else rank
    kv_rows = max(1, nkv // world) * hd
    k, v = (t[p + f"self_attn.{n}_proj.weight"] for n in "kv")
    out = {
        m + "self_attn.qkv_proj.weight": torch.cat(
            [
                rows(t[p + "self_attn.q_proj.weight"]),
                k[kv * kv_rows : (kv + 1) * kv_rows],
                v[kv * kv_rows : (kv + 1) * kv_rows],
            ]
        ),  # fmt: skip
        m + "self_attn.o_proj.weight": cols(t[p + "self_attn.o_proj.weight"]),
        m + "mlp.gate_up_proj.weight": torch.cat(
            [rows(t[p + "mlp.gate_proj.weight"]), rows(t[p + "mlp.up_proj.weight"])]
        ),
        m + "mlp.down_proj.weight": cols(t[p + "mlp.down_proj.weight"]),
        "model.fc.weight": t["fc.weight"],
        "model.norm.weight": t["norm.weight"],
        "model.embed_tokens.weight": vocab(t["embed_tokens.weight"]),
        "lm_head.weight": vocab(t["lm_head.weight"]),
    }
    for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        out[m + norm + ".weight"] = t[p + norm + ".weight"]
    assert nh % world == 0
    return out


def _case(M, folder: Path, world: int, rank: int) -> dict:

    import torch
    from vllm.config import set_current_vllm_config

    from helpers import vllm_mtp_models as T

    r: dict = {}
    try:
        model, vllm_config, draft = T.build(folder / "target", world, 3, "eagle3", folder / "draft")
        r["class"] = type(model).__name__
        params = dict(model.named_parameters())
        for q in params.values():
            M.as_bytes(q).fill_(0x55)
        with set_current_vllm_config(vllm_config), torch.no_grad():
            M.load_safetensors(model, draft)
        want = expected(folder, world, rank)
        r["unexpected"] = sorted(set(params) ^ set(want))
        r["mismatch"] = M.differing({n: params[n] for n in want if n in params}, want)
        r["poisoned"] = sorted(n for n, q in params.items() if bool((M.as_bytes(q) == 0x55).all()))
        r["shapes"] = {n: list(q.shape) for n, q in params.items()}
        r["flags"] = [model.has_own_embed_tokens, model.has_own_lm_head]
        r["d2t"] = model.draft_id_to_target_id is not None
    except Exception:  # noqa: BLE001 (reported to the parent test)
        r["error"] = traceback.format_exc()
    return r


if __name__ == "__main__":  # the MTP lane's worker set-up (vLLM on the CPU, the paths), this run
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from helpers.vllm_mtp_worker import main

    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], run=_run)
