"""The one replacement that lets vLLM 0.33's ``Qwen4ExpMTP`` be built on this CPU, for
tests/test_engines_vllm_mtp.py: its MTP layer's attention is QSA (``Qwen4ExpQSAAttention``),
whose attention implementation (``Qwen4ExpQSAFlashAttentionImpl``) raises "Qwen4Exp QSA
requires FlashAttention" at construction where vLLM's ``is_flash_attn_varlen_func_available``
says the FlashAttention kernel is missing (a GPU-only kernel, absent here).

:func:`install` makes that one check, as the QSA module imported it, answer True. Nothing that
reads the weights depends on it: the check chooses the kernel a forward would run (the
implementation holds no parameter, and its parent's constructor, run before the check, builds
on this CPU as it is); every module, parameter, ``weight_loader`` and ``load_weights`` of the
class is vLLM's own. No forward is run through the implementation."""

from __future__ import annotations


def install() -> None:
    """QSA's FlashAttention check answers True (idempotent)."""
    import vllm.models.qwen4_exp.nvidia.model  # noqa: F401 (imports qsa: its import order)
    import vllm.models.qwen4_exp.nvidia.qsa as qsa

    qsa.is_flash_attn_varlen_func_available = lambda: True
