"""vLLM 0.33's indexed sparse MLA (DeepSeek-V3.2's, GLM-5's, GLM-5-Next's and HY-V4's attention
with the lightning indexer) built on this CPU, for the tests that build vLLM's classes of those
models (tests/helpers/vllm_mtp_worker.py).

What is replaced, and why (:func:`allow`): ``CpuPlatform.get_attn_backend_cls``, the platform's
choice of the attention backend, which ``MLAAttention`` calls at construction and which raises
``NotImplementedError("Sparse Attention is not supported on CPU.")`` when the layer asks for a
sparse one (``use_sparse``). Where it is asked for a sparse MLA backend, the replacement answers
the platform's own MLA choice for the same request without ``use_sparse`` (its CPU MLA backend).
The backend is the kernel that runs attention: its implementation object holds no parameter and
no loader reads it. Every parameter of the attention, its indexer included
(``fused_qkv_a_proj``, ``q_b_proj``, ``kv_b_proj``, ``o_proj``, the norms, ``wq_b``,
``wk_weights_proj``, ``k_norm``...), is created by the model's own modules whatever the backend,
and loaded by the class's own ``load_weights`` and ``weight_loader``s. Every other request goes
to the platform's own choice unchanged."""

from __future__ import annotations

__all__ = ["allow"]


def allow() -> None:
    """Install the replacement of the module docstring (once; before a model is built)."""
    from vllm.platforms.cpu import CpuPlatform

    own = CpuPlatform.get_attn_backend_cls
    if getattr(own, "sparse_as_dense", False):
        return
    choose = own.__func__

    def dense_for_sparse(cls, selected_backend, attn_selector_config, num_heads=None):
        if attn_selector_config.use_sparse:  # a NamedTuple: the same request, not sparse
            attn_selector_config = attn_selector_config._replace(use_sparse=False)
        return choose(cls, selected_backend, attn_selector_config, num_heads)

    dense_for_sparse.sparse_as_dense = True
    CpuPlatform.get_attn_backend_cls = classmethod(dense_for_sparse)
