"""The architecture facts a meta model's twin was probed for (:func:`.arch.derive_twin`), kept
on disk between processes in ``$XDG_CACHE_HOME/fp8_dummy/facts`` (``~/.cache`` without it): a
process's first load of a config probed before skips the twin's build and its probes (most
of a first load's work after the checkpoint's names). Facts only, never a tensor.

A record is kept by the package's one trusted cache (:mod:`.._trusted_cache`: believed only
from a folder and file of this user's that nobody else can write, checked on the open
descriptors, never through a symlink, written atomically; anything else ignored with one
warning, the facts probed again). It is keyed on everything the facts depend on: the model
class (transformers' own only: a class of remote code can change under the same name), the
config's every field but its folder (:func:`key`), the probes' dtype; and its environment
(:func:`environment`): the package's version, the built library's hash and its Python
sources' hash, torch's version and build, transformers' version, the CPU the probes ran on,
the fault switch. Only facts probed without a warning are kept (a probe that failed warns
again at each load, as it does uncached). ``FP8_DUMMY_FACTS_CACHE=0`` turns the cache off."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
from pathlib import Path
from typing import Any

import torch

from .._trusted_cache import TrustedCache, faulted, library_hash

__all__ = ["directory", "enabled", "environment", "key", "load", "store"]

_CACHE = TrustedCache("facts", "architecture facts cache", "the facts are probed again")
_SETS = ("post", "residual", "gains", "centered")  # Arch's frozensets of names
_MAPS = ("offset", "combine", "multiplier")  # Arch's name -> number


def enabled() -> bool:
    """Whether the cache is read and written (``FP8_DUMMY_FACTS_CACHE=0``: never; nor where
    the package's sources cannot all be read: their hash is part of every record)."""
    return os.environ.get("FP8_DUMMY_FACTS_CACHE", "1").strip() != "0" and bool(_sources_hash())


def directory() -> Path:
    """Where the facts live."""
    return _CACHE.directory()


@functools.cache
def _sources_hash() -> str:
    """SHA-256 of the package's Python files (the probes are Python: an edited source is
    another prober, whatever its version says)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    try:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    except OSError:  # an editor's lock file, a file gone mid-upgrade: not cached
        return ""
    return digest.hexdigest()


def environment() -> list[Any]:
    """What the facts depend on beyond the model: the package (version, the built library's
    hash, its Python sources' hash), torch (version, git revision), transformers' version,
    the CPU (the probes' arithmetic), the fault switch."""
    import transformers

    from .._version import __version__

    cpu = [platform.machine(), torch.backends.cpu.get_cpu_capability()]
    return [[__version__, library_hash(), _sources_hash()],
            [torch.__version__, torch.version.git_version], transformers.__version__, cpu,
            faulted()]  # fmt: skip


def key(
    cls: type, config: Any, dtype: torch.dtype, model: torch.nn.Module | None = None
) -> str | None:
    """The key of ``cls``'s facts built from ``config`` in ``dtype``: the class's name, the
    config's class and every field but its folder (``_name_or_path``: a model built from a
    config reads no file), the attention and experts implementations the config chose (its
    own and its sub-configs': ``to_dict`` leaves them out), the dtype, and where ``model`` is
    given every module class in it with its ``forward`` (a class patched in this process by
    a kernel library keeps its name); None where the class is not transformers' own or the
    config does not say all of itself as JSON (not cached)."""
    if not cls.__module__.startswith("transformers.models."):
        return None
    try:
        fields = config.to_dict()
        fields.pop("_name_or_path", None)
        kind = type(config)
        chosen = [_implementations(config)]
        for sub in sorted(getattr(kind, "sub_configs", None) or {}):
            chosen.append([sub, _implementations(getattr(config, sub, None))])
        classes = sorted(_classes(model)) if model is not None else []
        # allow_nan: a key is compared as text (Mamba's time_step_limit holds inf)
        return json.dumps(
            [cls.__module__, cls.__qualname__, kind.__module__, kind.__qualname__,
             str(dtype), fields, chosen, classes], sort_keys=True,
        )  # fmt: skip
    except Exception:  # noqa: BLE001 (a config we cannot key: probed at each load)
        return None


def _implementations(config: Any) -> list:
    return [str(getattr(config, name, None)) for name in ("_attn_implementation",
                                                          "_experts_implementation")]  # fmt: skip


def _classes(model: torch.nn.Module) -> set[tuple[str, ...]]:
    out = set()
    for kind in {type(m) for m in model.modules()}:
        forward = getattr(kind, "forward", None)
        out.add((kind.__module__, kind.__qualname__, getattr(forward, "__module__", "") or "",
                 getattr(forward, "__qualname__", "") or ""))  # fmt: skip
    return out


def _encoded(arch: Any) -> dict:
    out: dict[str, Any] = {"embed_scale": arch.embed_scale}
    out.update({f: sorted(getattr(arch, f)) for f in _SETS})
    out.update({f: dict(getattr(arch, f)) for f in _MAPS})
    return out


def _decoded(value: Any, kind: type) -> Any:
    """The ``kind`` (:class:`.arch.Arch`, handed in: this module is below it) of a record's
    value, or None where its fields or types are not those :func:`_encoded` writes."""
    if not isinstance(value, dict) or set(value) != {"embed_scale", *_SETS, *_MAPS}:
        return None
    if not _finite(value["embed_scale"]):
        return None
    for f in _SETS:
        if not isinstance(value[f], list) or not all(isinstance(n, str) for n in value[f]):
            return None
    for f in _MAPS:
        items = value[f]
        if not isinstance(items, dict) or not all(_finite(c) for c in items.values()):
            return None
    sets = {f: frozenset(value[f]) for f in _SETS}
    return kind(embed_scale=value["embed_scale"], **sets, **{f: dict(value[f]) for f in _MAPS})


def _finite(c: Any) -> bool:
    """A plain finite number (what :func:`store` writes; JSON's reader takes ``Infinity``)."""
    return isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)


def load(key: str, kind: type) -> Any:
    """The facts cached for ``key`` as a ``kind`` (:class:`.arch.Arch`), or None (none, none
    to believe, or off)."""
    if not enabled():
        return None
    found = _CACHE.load(key, environment(), lambda v: _decoded(v, kind) is not None)
    return None if found is None else _decoded(found[0], kind)


def store(key: str, arch: Any) -> str | None:
    """Caches ``arch`` for ``key`` where it reads back as itself (plain numbers and names): the
    file written, or None (off, faulted, not cacheable, or unwritable: one warning)."""
    if not enabled():
        return None
    try:
        value = json.loads(json.dumps(_encoded(arch), allow_nan=False))
    except (TypeError, ValueError):  # a fact JSON cannot say exactly: probed at each load
        return None
    back = _decoded(value, type(arch))
    if (
        back is None
        or back != arch
        or any(type(a) is not type(b) for a, b in zip(_numbers(back), _numbers(arch)))
    ):
        return None
    return _CACHE.store(key, environment(), value)


def _numbers(arch: Any) -> list:
    """Every number of ``arch`` in a fixed order (an int read back as an int, a float as a
    float: the rule's arithmetic sees the same objects)."""
    out = [arch.embed_scale]
    for f in _MAPS:
        items = getattr(arch, f)
        out += [items[n] for n in sorted(items)]
    return out
