"""The on-disk cache of the proofs run in a child process (:mod:`._isolated`): one small JSON
file per verdict in ``$XDG_CACHE_HOME/fp8_dummy/proofs`` (``~/.cache`` without it), kept by the
package's one trusted cache (:mod:`._trusted_cache`: believed only from a directory and file
of this user's that nobody else can write, checked on the open descriptors, never through a
symlink, written atomically; anything else ignored with one warning and the path proved
again). A verdict names everything its bytes depend on (:func:`identity`: the library's build,
torch's, the device, the fault switch); a file whose key or identity differs from the current
ones, that does not parse, or whose detail is not a string is ignored and replaced. A run with
``FP8_DUMMY_FAULT`` set neither reads nor writes verdicts (its own are a fault's)."""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path
from typing import Any

from ._trusted_cache import TrustedCache, faulted, library_hash

__all__ = ["directory", "faulted", "file_name", "identity", "load", "store"]

_CACHE = TrustedCache("proofs", "proof cache", "paths are proved again")
file_name = TrustedCache.file_name


def directory() -> Path:
    """Where the verdicts live."""
    return _CACHE.directory()


def identity(device: str) -> list[Any]:
    """What a verdict on ``device`` depends on: the library (version, the built file's hash),
    torch (version, git revision, CUDA/HIP), the device and its properties, the fault switch."""
    import torch

    from ._version import __version__

    dev = torch.device(device)
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        uuid = str(getattr(p, "uuid", ""))
        where = ["cuda", p.name, f"{p.major}.{p.minor}", p.total_memory,
                 p.multi_processor_count, uuid, driver_version()]  # fmt: skip
    else:
        where = [dev.type, platform.machine(), torch.backends.cpu.get_cpu_capability()]
    torch_build = [torch.__version__, torch.version.git_version, torch.version.cuda,
                   torch.version.hip]  # fmt: skip
    return [[__version__, library_hash()], torch_build, where, faulted()]


def load(key: str, env: list[Any]) -> tuple[str, str] | None:
    """(the cached detail, "" meaning proven; the file) of ``key`` under ``env``, or None:
    none cached, or none to believe (one warning says why where it is not plain absence)."""
    return _CACHE.load(key, env, lambda detail: isinstance(detail, str))


def store(key: str, env: list[Any], detail: str) -> str | None:
    """Caches ``detail`` ("" proven) for ``key`` under ``env``: the file written, or None
    (faulted, or the cache cannot be written: one warning)."""
    return _CACHE.store(key, env, detail)


@functools.cache  # asked once per key and start
def driver_version() -> str:
    """The NVIDIA driver's version ("580.159.03"), or "" where nvidia-smi cannot tell."""
    cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return ""
