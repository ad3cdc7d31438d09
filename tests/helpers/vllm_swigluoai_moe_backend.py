"""One replacement that lets vLLM 0.33's MiniMax-M3 MoE (``MiniMaxM3MoE``, in its main layers and
in ``MiniMaxM3MTP``'s block) be built on this CPU, for tests/test_engines_vllm_mtp.py.

What it replaces: the choice of an unquantized MoE kernel
(``unquantized_fused_moe_method.select_unquantized_moe_backend``, which
``UnquantizedFusedMoEMethod.__init__`` calls), for the ``swigluoai_uninterleave`` activation
alone. MiniMax-M3's experts use that activation (gpt-oss's clamped SwiGLU with the gate and up
rows not interleaved); vLLM's CPU MoE kernel does not run it, so the choice raises
``NotImplementedError`` ("No Unquantized MoE backend supports the deployment configuration") on
this CPU, where a GPU would get its Triton kernel. Here it gets the CPU backend and no kernel
class, as helpers/vllm_invariant_models.py's ``prepare`` does for a non-gated MoE.

Why loading does not depend on it here: ``UnquantizedFusedMoEMethod.create_weights`` makes the
experts' ``w13_weight`` [E, 2·I, H] and ``w2_weight`` [E, H, I] from the MoE config (the
activation's gating: both halves); the backend could pad I (``maybe_roundup_sizes``: FlashInfer
TRT-LLM's and AITER's), but of the backends a GPU would choose for this activation neither
FlashInfer CUTLASS nor Triton pads, nor does the CPU backend, so the shapes are a GPU's; the
experts' ``weight_loader`` is the ``FusedMoE`` layer's. The backend is read by
``process_weights_after_loading`` and by the forward, neither of which runs in the test. Any
other activation's failure still raises."""

from __future__ import annotations

__all__ = ["allow_swigluoai_moe"]


def allow_swigluoai_moe() -> None:
    """Install the replacement (after helpers/vllm_invariant_models.py's ``prepare``, whose own
    replacement of the same choice it wraps)."""
    import vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method as unquantized
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    select = unquantized.select_unquantized_moe_backend
    if getattr(select, "allows_swigluoai", False):
        return

    def backend_or_cpu(moe_config, **kwargs):
        try:
            return select(moe_config=moe_config, **kwargs)
        except NotImplementedError:  # no CPU kernel for MiniMax-M3's clamped SwiGLU
            if moe_config.activation != MoEActivation.SWIGLUOAI_UNINTERLEAVE:
                raise
            return unquantized.UnquantizedMoeBackend.CPU, None

    backend_or_cpu.allows_swigluoai = True
    unquantized.select_unquantized_moe_backend = backend_or_cpu
