"""``--load-format fp8_dummy_realistic``: vLLM loads the logical checkpoint of its model's
config (:func:`fp8_dummy.realistic.config_checkpoint`; docs/export.md) as it would load
that checkpoint from disk: the model's own ``load_weights`` fed the checkpoint's names, each
tensor above 64 KiB a :class:`~fp8_dummy.realistic.LazyTensor` stand-in, smaller ones whole
(``LogicalModel.items``). vLLM's name mapping, fusing, stacking, sharding and expert
placement run unchanged, and each ``param.copy_(stand_in)`` they end in writes just that
block of the checkpoint tensor into the parameter: no large checkpoint tensor is
materialized, and a rank writes only its shard of it. vLLM's
``process_weights_after_loading`` then turns codes and scales into its kernels' layouts, as
after a real load. So every engine holds one model per (config, seed, routing): the one
``python -m fp8_dummy export`` writes."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from ...ops import as_int64
from ...realistic import config_checkpoint, config_of, parse_acceptance, parse_routing

__all__ = ["LOAD_FORMAT", "load_checkpoint", "loader_class"]

LOAD_FORMAT = "fp8_dummy_realistic"
DEFAULT_LOADER = "vllm.model_executor.model_loader.default_loader"


def load_checkpoint(
    model: torch.nn.Module, model_config: Any, routing: Any = "balanced", acceptance: Any = None
) -> set:
    """Load the logical checkpoint of ``model_config.hf_config`` (for a draft config with no
    main layers the model's own, :func:`_checkpoints_config`; seed: vLLM's ``--seed``,
    None: 0) into ``model`` through its own ``load_weights``; the names it loaded. The format
    and every tensor's role are settled before anything is written. A per-position
    ``acceptance`` must have one number per draft token of vLLM's speculative config."""
    seed = getattr(model_config, "seed", None)
    seed = as_int64(0 if seed is None else seed, "seed (vLLM's --seed)", LOAD_FORMAT) % (1 << 64)
    config = getattr(model_config, "hf_config", None)
    if config is None:
        raise ValueError(f"fp8_dummy: {LOAD_FORMAT}: the model config has no hf_config")
    config = _checkpoints_config(model, config, getattr(model_config, "model", None))
    acceptance = parse_acceptance(acceptance, positions=_draft_tokens())
    checkpoint = config_checkpoint(
        config, seed, routing=parse_routing(routing), acceptance=acceptance
    )
    loaded = model.load_weights(checkpoint.items())
    if loaded is not None:  # a parameter the checkpoint misses would hold garbage
        quantized = getattr(model_config, "quantization", None) is not None
        loaded = set(loaded)
        _all_loaded(model, loaded | _shared_heads(model, model_config, loaded), quantized)
    return set(loaded or ())


def _shared_heads(model: torch.nn.Module, model_config: Any, loaded: set) -> set:
    """An MTP draft's output heads its loader did not write (LongCat-Flash's reads none): vLLM's
    proposer replaces every MTP draft's ``lm_head`` and each layer's ``shared_head.head`` with
    the target's lm_head after loading (``_maybe_share_lm_head``; an EAGLE draft, which says
    ``has_own_lm_head``, keeps its own), so no checkpoint tensor need reach them."""
    try:
        from vllm.config import get_current_vllm_config

        spec = get_current_vllm_config().speculative_config
    except Exception:  # no current config (a model built outside vLLM's engine)
        return set()
    draft = getattr(spec, "draft_model_config", None)
    if draft is None or draft is not model_config or getattr(spec, "method", None) != "mtp":
        return set()
    if hasattr(model, "has_own_lm_head"):
        return set()
    return {
        n for n, _ in model.named_parameters()
        if n not in loaded and (n.startswith("lm_head.") or ".shared_head.head." in n)
    }  # fmt: skip


def _checkpoints_config(model: torch.nn.Module, config: Any, folder: Any = None) -> Any:
    """The config of the checkpoint the model reads. vLLM's MTP draft config of GLM-4.7-Flash
    says no main layers (``num_hidden_layers`` 0) while its draft class builds and loads the
    MTP layers after the target's, from the target's config, which the model holds: that one.
    GLM-OCR's says so at its top level only, beside a text config that keeps its layers: its
    own. MiniMax-M3's is its multimodal checkpoint's text config, promoted, in vLLM's own class
    (a model type transformers does not know): the checkpoint's config.json in ``folder``, read
    with transformers' own class."""
    if _promoted(config) and folder is not None:
        return config_of(folder)
    own = getattr(model, "config", None)
    get = getattr(config, "get_text_config", None)
    text = get() if callable(get) else config
    if getattr(text, "num_hidden_layers", None) == 0 and getattr(own, "num_hidden_layers", 0):
        return own
    return config


def _promoted(config: Any) -> bool:
    """vLLM's MiniMax-M3 draft config: the multimodal checkpoint's text config in vLLM's class,
    renamed ``minimax_m3_mtp`` (its speculative config's promotion)."""
    return getattr(config, "model_type", None) == "minimax_m3_mtp" and not hasattr(
        config, "text_config"
    )


def _draft_tokens() -> int | None:
    """vLLM's ``num_speculative_tokens`` where a speculative config is being loaded, else None."""
    try:
        from vllm.config import get_current_vllm_config

        spec = get_current_vllm_config().speculative_config
    except Exception:  # no current config (a model built outside vLLM's engine)
        return None
    return getattr(spec, "num_speculative_tokens", None) if spec is not None else None


def _all_loaded(model: torch.nn.Module, loaded: set, quantized: bool) -> None:
    """vLLM's own check after a real load (its default loader's ``track_weights_loading``,
    which exempts what no checkpoint holds: KV-cache and online-quantization scales), on
    quantized models too: a parameter the checkpoint never reached is an error."""
    default = importlib.import_module(DEFAULT_LOADER)
    track = getattr(getattr(default, "DefaultModelLoader", None), "track_weights_loading", None)
    if track is not None:
        track(None, model, loaded, quantized=quantized)
        return
    missing = sorted({n for n, _ in model.named_parameters()} - loaded)
    if missing:
        raise ValueError(
            f"fp8_dummy: {LOAD_FORMAT}: parameters no checkpoint tensor reached: {missing}"
        )


def loader_class(base: type, init: Any) -> type:
    """The load format's loader on vLLM's ``base`` (its dummy loader: nothing to download);
    ``init(self, load_config)``: takes the routing out of the extra config."""

    class FP8DummyRealisticModelLoader(base):
        """The logical checkpoint of the model's config, loaded by the model's own loaders."""

        __init__ = init

        def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
            load_checkpoint(model, model_config, self.routing, self.acceptance)

    return FP8DummyRealisticModelLoader
