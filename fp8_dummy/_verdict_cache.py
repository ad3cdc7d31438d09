"""The on-disk cache of the proofs run in a child process (:mod:`._isolated`): one small JSON
file per verdict in ``$XDG_CACHE_HOME/fp8_dummy/proofs`` (``~/.cache`` without it).

This library runs inside other people's servers, so a file read back is believed only when
nobody else could have written it: the directory is created 0700, and the directory and the
file must both be owned by this user and writable by neither group nor others (checked on
the open descriptors, never through a symlink); anything else is ignored with one warning
and the path proved again. A verdict names everything its bytes depend on (:func:`identity`:
the library's build, torch's, the device, the fault switch); a file whose key or identity
differs from the current ones, that does not parse, or whose fields have other types is
ignored and replaced. A write goes through the package's one atomic writer
(:mod:`._atomic_file`: a fresh temporary file of an unpredictable name, created
O_EXCL|O_NOFOLLOW in the same directory, then a rename). A cache that cannot
be read or written costs a warning, never a verdict. A run with ``FP8_DUMMY_FAULT`` set
neither reads nor writes verdicts (its own are a fault's)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import stat
import subprocess
import warnings
from pathlib import Path
from typing import Any

from ._atomic_file import write_file

__all__ = ["identity", "load", "store"]

_MAX_BYTES = 1 << 16  # a verdict is a few hundred bytes; anything longer is not ours
_warned: set[str] = set()


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(f"fp8_dummy: proof cache: {message}", RuntimeWarning, stacklevel=3)


def directory() -> Path:
    """Where the verdicts live."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fp8_dummy" / "proofs"


def faulted() -> str:
    """The fault switch as this process and its children see it ("" when off)."""
    return os.environ.get("FP8_DUMMY_FAULT", "").strip()


@functools.cache
def _library_hash() -> str:
    """SHA-256 of the loaded library's files (a release wheel's CUDA kernels too): a rebuild
    is another library."""
    from . import _library

    digest = hashlib.sha256()
    try:
        for path in _library.files():
            with open(path, "rb") as f:
                for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                    digest.update(chunk)
    except (OSError, AttributeError, TypeError):
        return "unknown"
    return digest.hexdigest()


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
    return [[__version__, _library_hash()], torch_build, where, faulted()]


def file_name(key: str, env: list[Any]) -> str:
    return hashlib.sha256(json.dumps([key, env]).encode()).hexdigest()[:32] + ".json"


def _trusted(st: os.stat_result, kind: str) -> str | None:
    """None if ``st`` is a ``kind`` ("directory", "file") only this user can write, else why."""
    is_kind = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not is_kind(st.st_mode):
        return f"not a {kind}"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by its group or others (mode {stat.S_IMODE(st.st_mode):03o})"
    return None


def _open_directory(create: bool) -> int | None:
    """A descriptor of the verdicts' directory if it is trusted (created 0700 if ``create``);
    else None, and one warning where it exists but cannot be trusted or made."""
    path = directory()
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            _warn_once(str(path), f"{path} cannot be created ({e.strerror}): not cached")
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):  # none yet (store warns if it cannot make it)
        return None
    except OSError as e:
        what = "is a symlink" if os.path.islink(path) else f"cannot be opened ({e.strerror})"
        _warn_once(str(path), f"{path} {what}: it is not used; paths are proved again")
        return None
    why = _trusted(os.fstat(fd), "directory")
    if why is not None:
        os.close(fd)
        _warn_once(str(path), f"{path} is {why}: not used; paths are proved again")
        return None
    return fd


def load(key: str, env: list[Any]) -> tuple[str, str] | None:
    """(the cached detail, "" meaning proven; the file) of ``key`` under ``env``, or None:
    none cached, or none to believe (one warning says why where it is not plain absence)."""
    if faulted():
        return None
    fd = _open_directory(create=False)
    if fd is None:
        return None
    name = file_name(key, env)
    path = directory() / name
    try:
        try:
            f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            _warn_once(f"read {path}", f"{path} cannot be read ({e.strerror}): proved again")
            return None
        try:
            why = _trusted(os.fstat(f), "file")
            data = os.read(f, _MAX_BYTES + 1) if why is None else b""
        finally:
            os.close(f)
    finally:
        os.close(fd)
    if why is not None:
        _warn_once(f"trust {path}", f"{path} is {why}: ignored; the path is proved again")
        return None
    try:
        record = json.loads(data.decode()) if len(data) <= _MAX_BYTES else None
    except ValueError:  # a torn or foreign file: proved again, then replaced
        return None
    if (
        not isinstance(record, dict)
        or record.get("key") != key
        or record.get("environment") != env
        or not isinstance(record.get("detail"), str)
    ):
        return None
    return record["detail"], str(path)


def store(key: str, env: list[Any], detail: str) -> str | None:
    """Caches ``detail`` ("" proven) for ``key`` under ``env``: the file written, or None
    (faulted, or the cache cannot be written: one warning)."""
    if faulted():
        return None
    fd = _open_directory(create=True)
    if fd is None:
        return None
    name = file_name(key, env)
    data = json.dumps({"key": key, "environment": env, "detail": detail}).encode()
    try:  # in the trusted directory's descriptor: never through a path swapped meanwhile
        write_file(name, data, mode=0o600, dir_fd=fd)
        return str(directory() / name)
    except OSError as e:
        where = directory()
        _warn_once(str(where), f"{where} is not writable ({e.strerror}): not cached")
        return None
    finally:
        os.close(fd)


@functools.cache  # asked once per key and start
def driver_version() -> str:
    """The NVIDIA driver's version ("580.159.03"), or "" where nvidia-smi cannot tell."""
    cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return ""
