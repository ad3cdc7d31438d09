"""A caller's ``config.json`` read for the commands (export, routing): the file as written and
the transformers config it makes, every problem a one-line :class:`ConfigError` before any
work (a file that is not JSON, not an object, names no model type transformers knows, or whose
values its config class refuses)."""

from __future__ import annotations

import json
import os
from typing import Any

from .hf_model import transformers_config_class

__all__ = ["ConfigError", "read_config"]


class ConfigError(ValueError):
    """A config the commands cannot read, named with the reason."""


def read_config(path: str | os.PathLike) -> tuple[Any, dict, str]:
    """(the transformers config, the file's JSON object as written, its directory) of a
    config.json or a directory holding one."""
    import transformers

    p = os.fspath(path)
    file = os.path.join(p, "config.json") if os.path.isdir(p) else p
    if not os.path.isfile(file):
        raise ConfigError(f"fp8_dummy: no config.json at {p}")
    try:
        with open(file, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, UnicodeDecodeError, RecursionError) as e:
        raise ConfigError(f"fp8_dummy: {file} cannot be read ({e})") from None
    except ValueError as e:
        raise ConfigError(f"fp8_dummy: {file} is not JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"fp8_dummy: {file} holds a {type(raw).__name__}, not a JSON object")
    kind = raw.get("model_type")
    if not isinstance(kind, str) or kind not in transformers.CONFIG_MAPPING:
        raise ConfigError(
            f"fp8_dummy: {file}: model_type {kind!r} is not one transformers "
            f"{transformers.__version__} knows"
        )
    quant = raw.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        raise ConfigError(
            f"fp8_dummy: {file}: quantization_config is a {type(quant).__name__}, not an object"
        )
    folder = os.path.dirname(file) or "."
    try:  # as transformers reads it (its file name, else its directory)
        named = os.path.basename(file) != "config.json"
        config = transformers.AutoConfig.from_pretrained(file if named else folder)
        if not type(config).__module__.startswith("transformers."):  # an engine registered its own
            own = transformers_config_class(kind)
            if own is None:  # a type only the engine's registry holds (vLLM's kimi_k2)
                raise ConfigError(
                    f"fp8_dummy: {file}: model_type {kind!r} is not one transformers "
                    f"{transformers.__version__} ships (an engine registered its own class)"
                )
            config = own.from_pretrained(file if named else folder)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 (the config class's own check, named)
        raise ConfigError(f"fp8_dummy: {file}: {type(e).__name__}: {e}") from None
    return config, raw, folder
