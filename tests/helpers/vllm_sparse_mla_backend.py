"""The one replacement that lets vLLM 0.33 build HY-V4's MTP draft (``HYV4MTP``) on this CPU:
the sparse MLA attention backend's choice.

HY-V4's MTP block takes the last main layer's attention type, the indexed attention (MLA with
the lightning indexer), and ``HYV4MLAAttention`` asks the platform for a sparse MLA backend at
construction; vLLM's CPU platform has none (``get_attn_backend_cls`` raises "Sparse Attention
is not supported on CPU"), so the class refuses to build ("HYV4 sparse attention was
requested, but no valid sparse MLA backend is available"). Inside :func:`sparse_as_dense`, a
sparse request gets the backend the CPU platform chooses for the same request made dense (its
CPU MLA backend). Loading weights does not depend on that choice: the backend holds no
parameters (its impl is built around the layer's own ``kv_b_proj``), and every parameter, its
``weight_loader`` and ``HYV4MTP.load_weights`` stay vLLM's own; the indexer, its modules and
the sparse flags the layer keeps are built as vLLM builds them. Nothing runs a forward."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def sparse_as_dense():
    """vLLM's CPU platform answering a sparse MLA backend request as the dense one, within;
    its own choice restored (and the selector's cache of choices cleared) after."""
    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.attention import selector

    own = CpuPlatform.__dict__["get_attn_backend_cls"]

    def dense(cls, selected_backend, attn_selector_config, num_heads=None):
        if attn_selector_config.use_sparse:
            attn_selector_config = attn_selector_config._replace(use_sparse=False)
        return own.__func__(cls, selected_backend, attn_selector_config, num_heads)

    CpuPlatform.get_attn_backend_cls = classmethod(dense)
    selector._cached_get_attn_backend.cache_clear()
    try:
        yield
    finally:
        CpuPlatform.get_attn_backend_cls = own
        selector._cached_get_attn_backend.cache_clear()
