"""SGLang 0.5.23's own model classes (Llama, Qwen3-MoE, DeepSeek-V3, Mixtral, LongCat-Flash), in
bf16 and FP8 block (16 x 16), Qwen3-MoE and DeepSeek-V3 in fp8 too (compressed-tensors' FP8 per
tensor, the routed experts per channel), all but LongCat-Flash in NVFP4 (the experts with the
Marlin MoE runner, :data:`MORE`), built on this CPU from tiny configs at TP=1 and TP=2
(gloo), for tests/test_engines_sglang_realistic.py (inside its workers: this module imports
SGLang lazily).

Built as SGLang builds a model: ``ServerArgs`` of a folder holding config.json, published
into SGLang's runtime context (``runtime_context.publish``: parallel ranks, MoE flags),
``ModelConfig.from_server_args``, the distributed groups, then the loader's
``_initialize_model`` under ``set_default_torch_dtype`` and the CPU device, through the
plugin's hook on it (the realistic fill reads the config as SGLang handed it). Every parameter
is created by SGLang's code. What is replaced, and why (:func:`prepare`):

- ``rotary_embedding.base._is_cpu`` is True: on a device that is neither CUDA nor SGLang's
  CPU engine (nor XPU, NPU, MUSA, MPS) ``RotaryEmbedding.__init__`` imports vLLM's custom
  ops for a fallback kernel. The flag only chooses a forward; rotary embeddings have no
  parameters.
- ``get_rope_wrapper`` is called with ``device=None``: DeepSeek's MLA passes "cpu", which
  takes SGLang's CPU-engine rope, supporting only DeepSeek's yarn scaling. With None, the
  GPU path's plain rotary embedding, again without parameters.
- DeepSeek's yarn rotary embedding (``rope_variant.get_device``) makes its cos/sin cache on
  "cpu": given no device it asks for an accelerator and raises on this machine. GLM-4.7-Flash's
  MLA takes it (SGLang rewrites its rope type to ``deepseek_yarn``); no parameters.
- the model-parallel groups are plain gloo groups (no PyNccl, custom all-reduce, MSCCL++ or
  symmetric memory): the CUDA torch wheel ships libnccl, so SGLang would build a NCCL
  communicator on the CPU. Construction and ``load_weights`` never communicate.
- ``CompressedTensorsConfig._check_scheme_supported`` answers True: it asks the CUDA driver
  for the GPU's compute capability (raising on this CPU) to choose compressed-tensors' FP8
  W8A8 linear scheme over the weight-only W8A16 one; a GPU that serves FP8 (Ada, Hopper)
  gets W8A8. The MoE's scheme is picked by the experts' names alone.
- SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE``) stays off: it needs ``sgl_kernel``.
- ``torch.cuda.get_device_capability`` answers a Hopper's (9, 0) while the server arguments of
  a model SGLang counts as DeepSeek's sparse attention (DSA: its ``is_deepseek_dsa`` of the
  config.json; HY-V4 here, not DeepSeek-V4, whose own attention asks nothing) are resolved,
  and then only: SGLang's DSA resolution asks the CUDA driver (raising on this CPU)
  for the KV cache's dtype and the DSA attention backends, both of which HY-V4's learnable
  attention sinks fix whatever the answer (bfloat16, ``flashmla_sparse``). The KV cache and
  the attention kernels hold no parameter that a loader reads.

``process_weights_after_loading`` never runs (it needs SGLang's kernels): the weights are
compared as loaded. Qwen3-MoE has no dense layer here: SGLang 0.5.23's Qwen3-MoE builds every
layer sparse whatever ``mlp_only_layers`` says. DeepSeek-V3's config has ``moe_layer_freq``,
as DeepSeek's published ones do (transformers' class does not add it; SGLang reads it).
LongCat-Flash's is tests/helpers/speculative.py's (MLA, 16 experts top-2 and 4 zero experts, one
MTP layer, as its release has: SGLang's main model skips its ``mtp`` names), with
``rope_scaling`` beside transformers' ``rope_parameters``: SGLang's own LongCat config class
reads that key alone.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from pathlib import Path

import torch

from helpers import vllm_invariant_models as V

# not Step-3.5-Flash's text model: SGLang 0.5.23's class indexes the config's rope_theta per
# layer (a scalar in transformers' config: "'int' object is not subscriptable", measured)
MODELS = {m: dict(V.COMMON, **fields) for m, fields in V.MODELS.items() if m != "step3p5"}
MODELS["qwen3_moe"]["mlp_only_layers"] = []
MODELS["deepseek_v3"]["moe_layer_freq"] = 1  # in DeepSeek's published configs; SGLang reads it


def _fp8_group(strategy: str, targets: list) -> dict:
    weights = dict(num_bits=8, type="float", strategy=strategy, symmetric=True, dynamic=False)
    acts = dict(num_bits=8, type="float", strategy="token", symmetric=True, dynamic=True)
    return dict(targets=targets, weights=weights, input_activations=acts)


QUANTS = {
    "bf16": None,
    "blk": dict(quant_method="fp8", activation_scheme="dynamic", weight_block_size=[16, 16]),
    # compressed-tensors' FP8 per tensor, the routed experts per channel in a group of their own
    # (docs/export.md's fp8): the export reads it as its fp8 format
    "fp8": dict(
        quant_method="compressed-tensors",
        format="float-quantized",
        config_groups=dict(
            group_0=_fp8_group("tensor", ["Linear"]),
            group_1=_fp8_group("channel", [r"re:.*\.experts\.\d+\.[^.]+$"]),
        ),
        ignore=["lm_head"],
    ),  # fmt: skip
    # ModelOpt's NVFP4 (docs/export.md's nvfp4); SGLang rewrites the method to "modelopt_fp4"
    # in the config it hands the class, which the fill reads as the same checkpoint
    "nvfp4": dict(quant_method="modelopt", quant_algo="NVFP4", group_size=16),
}


def longcat_flash() -> dict:
    """LongCat-Flash's config.json fields at this harness's sizes (hidden 64, vocabulary 200,
    two decoder layers, one MTP layer), with the key SGLang's LongCat config reads its RoPE
    from."""
    from helpers import vllm_mtp_models as T

    config = T.fields("longcat_flash")
    config["rope_scaling"] = config["rope_parameters"]
    return config


# the models whose fields are made when written (tests/helpers/speculative.py's configs, which
# the workers need not import)
LATER = {"longcat_flash": longcat_flash}
CASES = [f"{m}-{q}" for m in (*MODELS, *LATER) for q in ("bf16", "blk")]
CASES += ["qwen3_moe-fp8", "deepseek_v3-fp8"]
CASES += [f"{m}-nvfp4" for m in MODELS]
# SGLang's ModelOpt FP4 MoE method refuses every MoE runner but Marlin off Blackwell (as SGLang
# is told with --moe-runner-backend marlin); the runner chooses the experts' forward kernels
# only, their parameters are the method's either way
MORE = {"nvfp4": dict(moe_runner_backend="marlin")}
# the NVFP4 experts' block scales in the layout SGLang's kernels read, made from the loaded
# ``w13_weight_scale``/``w2_weight_scale`` by ``process_weights_after_loading``: no checkpoint's
SWIZZLED = ("w13_blockscale_swizzled", "w2_blockscale_swizzled")


def write_config(case: str, folder: Path) -> Path:
    model, quant = case.split("-")
    folder.mkdir(parents=True, exist_ok=True)
    config = dict(MODELS[model]) if model in MODELS else LATER[model]()
    if QUANTS[quant]:
        config["quantization_config"] = QUANTS[quant]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def prepare() -> None:
    """The replacements of the module docstring; before the first model is built."""
    import sglang.srt.distributed.parallel_state as ps
    import sglang.srt.layers.rotary_embedding as rope
    import sglang.srt.layers.rotary_embedding.base as rope_base
    import sglang.srt.layers.rotary_embedding.factory as factory
    import sglang.srt.layers.rotary_embedding.rope_variant as variant

    rope_base._is_cpu = True
    variant.get_device = lambda *_, **__: "cpu"
    own_rope = factory.get_rope_wrapper

    def get_rope_wrapper(*args, device=None, **kwargs):
        return own_rope(*args, device=None, **kwargs)

    factory.get_rope_wrapper = get_rope_wrapper
    if hasattr(rope, "get_rope_wrapper"):
        rope.get_rope_wrapper = get_rope_wrapper
    # compressed-tensors' FP8 W8A8 linear scheme is chosen where the GPU's compute capability
    # allows (else weight-only W8A16): the answer of a GPU that serves FP8 (Ada, Hopper), not
    # the CUDA driver this CPU lacks (it raises). It picks a linear layer's scheme class only.
    from sglang.srt.layers.quantization.compressed_tensors import compressed_tensors as ct

    ct.CompressedTensorsConfig._check_scheme_supported = lambda self, *a, **k: True
    ps.set_custom_all_reduce(False)
    own_group = ps.init_model_parallel_group

    def init_model_parallel_group(*args, **kwargs):
        kwargs.update(use_pynccl=False, use_custom_allreduce=False, use_mscclpp=False)
        kwargs.update(use_torch_symm_mem_allreduce=False)
        return own_group(*args, **kwargs)

    ps.init_model_parallel_group = init_model_parallel_group
    _dsa_capability()


def _dsa_capability() -> None:
    """The capability a DSA model's server-argument resolution asks for (module docstring):
    a Hopper's, while those arguments resolve."""
    from unittest import mock

    from sglang.srt.configs.model_config import is_deepseek_dsa
    from sglang.srt.server_args import ServerArgs

    own = ServerArgs.resolve_once
    if getattr(own, "dsa_capability", False):
        return

    def resolve_once(self) -> None:
        config = json.loads((Path(self.model_path) / "config.json").read_text())
        if not is_deepseek_dsa(config):
            return own(self)
        with mock.patch.object(torch.cuda, "get_device_capability", lambda *_, **__: (9, 0)):
            return own(self)

    resolve_once.dsa_capability = True
    ServerArgs.resolve_once = resolve_once


def server_args(folder: Path, world: int, **more):
    """``more``: other ServerArgs (Qwen3-Next's MTP test: no radix cache, whose hybrid-model
    variant needs a platform's Mamba cache snapshots; it has no say in the parameters)."""
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(
        model_path=str(folder), tp_size=world, device="cpu", dtype="bfloat16",
        skip_tokenizer_init=True, load_format="auto", **more,
    )  # fmt: skip


def start(folder: Path, world: int, rank: int, port: int, **more) -> None:
    """SGLang's runtime context and process groups for rank ``rank`` of ``world``."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
    )
    from sglang.srt.layers.dp_attention import init_dp_gathered_buffer, initialize_dp_attention
    from sglang.srt.layers.moe import initialize_moe_config
    from sglang.srt.runtime_context import SpawnRanks, publish

    args = server_args(folder, world, **more)
    publish(args, role="test", ranks=SpawnRanks(world_rank=rank, gpu_id=rank))
    initialize_moe_config()
    model_config = ModelConfig.from_server_args(args)
    init_distributed_environment(
        backend="gloo", world_size=world, rank=rank, local_rank=rank,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
    )  # fmt: skip
    initialize_model_parallel()
    initialize_dp_attention(args)
    init_dp_gathered_buffer(model_config)


def build(folder: Path, world: int, rank: int, draft: bool = False, **more) -> torch.nn.Module:
    """SGLang's model of the config.json in ``folder``, its tensors as SGLang creates them;
    ``draft``: its speculative draft (the NextN/MTP class SGLang's draft config names)."""
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.loader import _get_quantization_config, _initialize_model
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    from fp8_dummy.engines import sglang as fsglang

    args = server_args(folder, world, **more)
    model_config = ModelConfig.from_server_args(args, is_draft_model=draft)
    load_config = LoadConfig(load_format="auto", tp_rank=rank)
    quant_config = _get_quantization_config(model_config, load_config)
    with _runner(more), set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
        # through the plugin's hook on it, as SGLang's loaders build in the realistic mode
        return fsglang._around_build(_initialize_model, model_config, load_config, quant_config)


@contextlib.contextmanager
def _runner(more: dict):
    """SGLang's MoE runner flag (set once per process from the published server arguments,
    :func:`start`) as ``more`` names it, for one build: the cases of one process differ."""
    from sglang.srt.layers.moe import utils

    moe = utils.get_flags().moe
    own = moe.runner_backend
    if "moe_runner_backend" in more:
        moe.runner_backend = utils.resolve_moe_runner_backend(more["moe_runner_backend"])
    try:
        yield
    finally:
        moe.runner_backend = own


def load_safetensors(model: torch.nn.Module, folder: Path) -> None:
    """SGLang's own safetensors reader (``--load-format safetensors``'s iterator) into the
    model's own ``load_weights``."""
    from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator

    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    with torch.no_grad():
        model.load_weights(safetensors_weights_iterator(files))


def tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return V.tensors(model)


def compare(ours: torch.nn.Module, theirs: torch.nn.Module) -> dict:
    """The in-engine fill (its parameters poisoned 0x55 first) against the twin read from the
    export (0xAA): what each left unwritten ("unreached", "unread"), and, what neither wrote
    ("neither") left out, the tensors whose bytes differ."""
    mine, other = tensors(ours), tensors(theirs)

    def still(t: torch.Tensor, byte: int) -> bool:
        return bool((V.as_bytes(t) == byte).all())

    unreached = sorted(n for n in mine if still(mine[n], 0x55))
    unread = sorted(n for n in other if still(other[n], 0xAA))
    neither = sorted(set(unreached) & set(unread))
    for n in neither:
        del mine[n], other[n]
    return {"unreached": unreached, "unread": unread, "neither": neither,
            "checked": len(mine), "mismatch": V.differing(mine, other)}  # fmt: skip


RANKS = [(1, 0), (2, 0), (2, 1)]  # TP=1, and TP=2's two ranks


def run_ranks(worker: Path, root: Path, repo: Path) -> dict:
    """``worker`` in three processes, TP=1 and TP=2's two ranks (one gloo group per TP), each
    given ``root``; {(world, rank): findings}. The engines' choices from the environment
    (routing, acceptance) are the test's own, not the caller's."""
    import sys

    from helpers import workers as W

    env = W.environment()
    for name in ("FP8_DUMMY_ROUTING", "FP8_DUMMY_ACCEPTANCE"):
        env.pop(name, None)
    ports = {1: W.free_port(), 2: W.free_port()}
    commands = [
        [sys.executable, str(worker), str(w), str(r), str(ports[w]), str(root), str(root),
         str(repo)]
        for w, r in RANKS
    ]  # fmt: skip
    found = W.gather(commands, [root / f"{w}-{r}.json" for w, r in RANKS], env)
    return dict(zip(RANKS, found))
