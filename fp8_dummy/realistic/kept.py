"""The logical checkpoint of a config (:func:`config_checkpoint`), made once per (config, seed,
routing, acceptance) in a process: an engine that loads the same model again (a reload, a
second model of the same config) reuses its specs and routing, the most of a load's Python
work after the loader's own. A checkpoint is read, never changed, by whoever holds it."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from ..collector import paused
from ..ops import as_int64
from .config_formats import config_format
from .hf_model import build_model
from .logical import LogicalModel, logical_model
from .routing import parse_routing
from .speculative import parse_acceptance

__all__ = ["KEPT", "config_checkpoint", "forget"]

KEPT = 4  # checkpoints kept: a target and its draft, and a spare pair
_kept: OrderedDict[tuple, LogicalModel] = OrderedDict()
_lock = threading.Lock()  # loads in several threads share the cache; the build runs outside it


@paused
def config_checkpoint(
    config: Any, seed: int = 0, *, routing: Any = "balanced", acceptance: Any = None
) -> LogicalModel:
    """The logical checkpoint of ``config`` in its own format (:func:`config_format`), MTP
    layers included: the checkpoint an engine would load for it, all checked before anything
    is made; the one made before in this process where (config, seed, routing, acceptance)
    are the same."""
    seed = as_int64(seed, "seed", "fp8_dummy") % (1 << 64)
    profile, accept = parse_routing(routing), parse_acceptance(acceptance)
    key = _key(config, seed, profile, accept)
    if key is not None:
        with _lock:
            if key in _kept:
                _kept.move_to_end(key)
                return _kept[key]
    fmt = config_format(config)
    model = build_model(config, dtype=fmt.dtype)
    made = logical_model(model, seed, routing=profile, format=fmt, acceptance=accept, mtp=True)
    if key is not None:
        with _lock:
            _kept[key] = made
            while len(_kept) > KEPT:
                _kept.popitem(last=False)
    return made


def forget() -> None:
    """Every kept checkpoint dropped (the next load makes its own)."""
    with _lock:
        _kept.clear()


def _key(config: Any, seed: Any, profile: Any, accept: Any) -> tuple | None:
    """What the checkpoint depends on, by value: the config's every field (its class too:
    an engine's own config class is read as transformers'; its folder: a designed stream's
    tokens), the seed, the parsed routing and acceptance; None where the config does not say
    all of itself as JSON."""
    try:
        fields = json.dumps(config.to_dict(), sort_keys=True)
        where = str(getattr(config, "name_or_path", ""))
        kind = (type(config).__module__, type(config).__qualname__, where)
        key = (*kind, fields, seed, profile, accept)
        hash(key)
    except Exception:  # noqa: BLE001 (a config we cannot key: made for each load)
        return None
    return key
