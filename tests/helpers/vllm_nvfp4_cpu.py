"""NVFP4 (ModelOpt's format) layers of vLLM 0.33 built on this CPU: the kernel choices its
quantization methods make at construction, replaced while a model is built (:func:`choices`),
so that its linears and experts register their own parameters and its ``weight_loader``s fill
them. Neither kernel runs: nothing here calls a forward or ``process_weights_after_loading``.

- The linear kernel: vLLM's registry of NVFP4 linear kernels lists none for the CPU platform
  ("Failed to find a kernel that can implement the NVFP4 linear layer"); the CPU is given the
  list the ROCm platform has (vLLM's own emulation kernel). It is chosen after the linear's
  ``create_weights`` has registered its parameters.
- The MoE backend: none supports the CPU (the emulation experts are Triton's); where vLLM's
  selection finds none, the emulation backend is taken. The backend decides one thing about the
  parameters: whether the input scales span every expert of every rank (FlashInfer's backends)
  or the rank's; without expert parallelism, as in these tests, both are every expert."""

from __future__ import annotations

import contextlib
from unittest import mock


@contextlib.contextmanager
def choices():
    """vLLM's NVFP4 linear kernel list and MoE backend selection, as above, for the block."""
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.layers.fused_moe.oracle import nvfp4
    from vllm.model_executor.layers.quantization import modelopt
    from vllm.platforms import PlatformEnum

    select = modelopt.select_nvfp4_moe_backend

    def or_emulation(*args, **kwargs):
        try:
            return select(*args, **kwargs)
        except NotImplementedError as e:  # "No NvFp4 MoE backend supports the deployment ..."
            if not str(e).startswith("No NvFp4 MoE backend supports"):
                raise
            from vllm.model_executor.layers.fused_moe.experts import nvfp4_emulation_moe as e

            return nvfp4.NvFp4MoeBackend.EMULATION, e.Nvfp4QuantizationEmulationTritonExperts

    cpu_nvfp4 = {PlatformEnum.CPU: [linear.EmulationNvFp4LinearKernel]}
    with (
        mock.patch.dict(linear._POSSIBLE_NVFP4_KERNELS, cpu_nvfp4),
        mock.patch.object(modelopt, "select_nvfp4_moe_backend", or_emulation),
    ):
        yield
