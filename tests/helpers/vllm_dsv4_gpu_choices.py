"""The GPU-only choices vLLM 0.33's GPU DeepSeek-V4 MTP class
(``vllm.models.deepseek_v4.nvidia.mtp.DeepSeekV4MTP``) makes while it is built, replaced so that
it builds on this CPU with its own modules registering their own parameters (its MTP layer,
vLLM's DeepSeek-V4 decoder layer, its FlashMLA attention class, its MoE, the quantization
methods' ``create_weights``) and its own ``load_weights`` and ``weight_loader``s filling them.
Each is replaced only while the class is built (:func:`build`); none registers a parameter:

- the platform's pick of the class: ``vllm.models.deepseek_v4`` resolves ``DeepSeekV4MTP`` by
  platform, on the CPU to a stub that raises at construction; the GPU class is given to vLLM's
  own ``initialize_model`` (its ``model_class``), which builds it as the proposer does;
- ``torch.cuda.Stream``: ``DeepSeekV4MultiTokenPredictor`` makes three auxiliary streams (to
  overlap the attention's GEMMs in the forward), which need a CUDA driver; an inert object
  stands for each. No parameter is made from them and no loader reads them;
- the FlashMLA attention's o_proj einsum recipe (``compute_fp8_einsum_recipe``, imported into
  ``vllm.models.deepseek_v4.nvidia.flashmla``): it reads the GPU's compute capability (none
  here: an assertion) to pick the forward's FP8 einsum scale layout; SM90's is given. The
  attention's linears register their parameters before it; no loader reads it;
- NVFP4's linear kernel and MoE backend (ModelOpt's format): as helpers/vllm_nvfp4_cpu.py
  replaces them for every vLLM class built here.

The JIT warmups the modules register (tilelang's, absent here) are a config choice, not a
replacement: the draft's model config says ``enforce_eager``, which turns them off, as it does
in vLLM's engine."""

from __future__ import annotations

import contextlib
from unittest import mock

import torch

# SM90's (Hopper's) recipe and scale layout, as compute_fp8_einsum_recipe returns them there
_SM90_RECIPE = ((1, 128, 128), False)


class _NoStream:
    """Stands for a ``torch.cuda.Stream`` the class keeps for its forward."""

    def __init__(self, *args, **kwargs) -> None:
        pass


@contextlib.contextmanager
def _gpu_choices():
    from vllm.models.deepseek_v4.nvidia import flashmla

    from helpers import vllm_nvfp4_cpu

    with (
        mock.patch.object(torch.cuda, "Stream", _NoStream),
        mock.patch.object(flashmla, "compute_fp8_einsum_recipe", lambda: _SM90_RECIPE),
        vllm_nvfp4_cpu.choices(),
    ):
        yield


def build(vllm_config, model_config) -> torch.nn.Module:
    """The GPU ``DeepSeekV4MTP`` of ``model_config`` (the draft's) built by vLLM's
    ``initialize_model`` in ``vllm_config``, on the CPU, in the draft's dtype."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.models.deepseek_v4.nvidia.mtp import DeepSeekV4MTP
    from vllm.utils.torch_utils import set_default_torch_dtype

    with set_current_vllm_config(vllm_config), _gpu_choices():
        with set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
            return initialize_model(
                vllm_config, model_config=model_config, model_class=DeepSeekV4MTP
            )
