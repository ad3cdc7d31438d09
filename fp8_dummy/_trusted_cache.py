"""The package's one mechanism for small JSON records kept on disk between processes
(:class:`TrustedCache`): the proofs' verdicts (:mod:`._verdict_cache`) and the realistic
wing's architecture facts (:mod:`.realistic.facts_cache`), one folder each under
``$XDG_CACHE_HOME/fp8_dummy`` (``~/.cache`` without it), one file per record.

This library runs inside other people's servers, so a file read back is believed only when
nobody else could have written it: the folder is created 0700, and the folder and the file
must both be owned by this user and writable by neither group nor others (checked on the
open descriptors, never through a symlink); anything else is ignored with one warning and the
record made again. A record names everything its value depends on (its key and environment,
the caller's); a file whose key or environment differs from the current ones, that does not
parse, or whose value the caller does not accept is ignored and replaced. A write goes
through the package's one atomic writer (:mod:`._atomic_file`: a fresh temporary file of an
unpredictable name, created O_EXCL|O_NOFOLLOW in the same folder, then a rename). A cache
that cannot be read or written costs a warning, never a result. A run with
``FP8_DUMMY_FAULT`` set neither reads nor writes records (its own are a fault's)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._atomic_file import write_file

__all__ = ["TrustedCache", "faulted", "library_hash"]

_MAX_BYTES = 1 << 16  # a record is at most a few KiB; anything longer is not ours
_warned: set[str] = set()  # one warning per problem and process, over every cache


def faulted() -> str:
    """The fault switch as this process and its children see it ("" when off)."""
    return os.environ.get("FP8_DUMMY_FAULT", "").strip()


@functools.cache
def library_hash() -> str:
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
        return ""  # unknown: the caches that need it are off (a constant would match a rebuild)
    return digest.hexdigest()


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


class TrustedCache:
    """The records of one folder: ``folder`` under the cache root; ``label`` names the cache
    in its warnings ("proof cache"), ``again`` what happens to a record not believed
    ("proved again")."""

    def __init__(self, folder: str, label: str, again: str) -> None:
        self.folder, self.label, self.again = folder, label, again

    def directory(self) -> Path | None:
        """Where the records live (read from the environment at each call): None where no
        absolute folder is known (a relative ``XDG_CACHE_HOME`` is ignored, as XDG says; no
        home: not cached, never a folder under the server's working directory)."""
        base = os.environ.get("XDG_CACHE_HOME", "")
        if not os.path.isabs(base):
            try:
                home = Path.home()
            except (RuntimeError, KeyError, OSError):
                return None
            if not home.is_absolute():
                return None
            base = str(home / ".cache")
        return Path(base) / "fp8_dummy" / self.folder

    @staticmethod
    def file_name(key: str, env: list[Any]) -> str:
        return hashlib.sha256(json.dumps([key, env]).encode()).hexdigest()[:32] + ".json"

    def _warn_once(self, what: str, message: str) -> None:
        if what not in _warned:
            _warned.add(what)
            warnings.warn(f"fp8_dummy: {self.label}: {message}", RuntimeWarning, stacklevel=4)

    def _open_directory(self, create: bool) -> tuple[int, Path] | None:
        """(a descriptor of the folder, its path) if it is trusted (created 0700 if
        ``create``); else None, and one warning where it exists but cannot be trusted or made."""
        path = self.directory()
        if path is None:
            self._warn_once("no folder", f"no absolute cache folder is known: {self.again}")
            return None
        if create:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            except OSError as e:
                self._warn_once(str(path), f"{path} cannot be created ({e.strerror}): not cached")
                return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            if os.path.islink(path):  # Linux says ENOTDIR or ELOOP for a link: never followed
                what = "is a symlink"
            elif isinstance(e, (FileNotFoundError, NotADirectoryError)):
                return None  # none yet (store warns if it cannot make it)
            else:
                what = f"cannot be opened ({e.strerror})"
            self._warn_once(str(path), f"{path} {what}: it is not used; {self.again}")
            return None
        why = _trusted(os.fstat(fd), "directory")
        if why is not None:
            os.close(fd)
            self._warn_once(str(path), f"{path} is {why}: not used; {self.again}")
            return None
        return fd, path

    def load(
        self, key: str, env: list[Any], valid: Callable[[Any], bool]
    ) -> tuple[Any, str] | None:
        """(the value cached for ``key`` under ``env``, the file), or None: none cached, or
        none to believe (one warning says why where it is not plain absence, a value
        ``valid`` refuses, or a file that does not parse: those are replaced silently)."""
        if faulted() or not library_hash():  # a library not hashed: no record is its own
            return None
        opened = self._open_directory(create=False)
        if opened is None:
            return None
        fd, folder = opened
        name = self.file_name(key, env)
        path = folder / name
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                f = os.open(name, flags, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                why = f"{path} cannot be read ({e.strerror}): {self.again}"
                self._warn_once(f"read {path}", why)
                return None
            try:
                why = _trusted(os.fstat(f), "file")
                data = os.read(f, _MAX_BYTES + 1) if why is None else b""
            finally:
                os.close(f)
        finally:
            os.close(fd)
        if why is not None:
            self._warn_once(f"trust {path}", f"{path} is {why}: ignored; {self.again}")
            return None
        try:
            record = json.loads(data.decode()) if len(data) <= _MAX_BYTES else None
        except (ValueError, RecursionError):  # a torn or foreign file: made again, replaced
            return None
        if (
            not isinstance(record, dict)
            or record.get("key") != key
            or record.get("environment") != env
            or "value" not in record
            or not valid(record["value"])
        ):
            return None
        return record["value"], str(path)

    def store(self, key: str, env: list[Any], value: Any) -> str | None:
        """Caches ``value`` (JSON) for ``key`` under ``env``: the file written, or None
        (faulted, or the cache cannot be written: one warning)."""
        if faulted() or not library_hash():
            return None
        data = json.dumps({"key": key, "environment": env, "value": value}).encode()
        if len(data) > _MAX_BYTES:  # one load would not believe: not written
            return None
        opened = self._open_directory(create=True)
        if opened is None:
            return None
        fd, folder = opened
        name = self.file_name(key, env)
        try:  # in the trusted folder's descriptor: never through a path swapped meanwhile
            write_file(name, data, mode=0o600, dir_fd=fd)
            return str(folder / name)
        except OSError as e:
            self._warn_once(str(folder), f"{folder} is not writable ({e.strerror}): not cached")
            return None
        finally:
            os.close(fd)
