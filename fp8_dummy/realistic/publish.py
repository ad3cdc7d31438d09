"""An export's directory published whole or not at all (docs/export.md, "What an export
guarantees"): every file is made in a private staging directory beside OUT (``mkdtemp``: mode
0700, an unpredictable hidden name ending ``.partial``), and the finished directory takes
OUT's name with one rename. So at every instant OUT is absent (or the empty directory it was)
or the complete checkpoint; a failure or an interrupt removes the staging directory. The
rename never replaces anything but an empty directory: where OUT was absent, it is
``renameat2(RENAME_NOREPLACE)`` (else ``mkdir`` then ``rename`` over that empty directory),
so a concurrent export, a file or a symlink planted at OUT meanwhile is refused, never
replaced or written through. The published directory gets the mode OUT had, else the one
``mkdir`` would give it (0777 less the umask)."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from .._atomic_file import directory_problem

__all__ = ["OutError", "PublishError", "check_out", "staged"]

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


class OutError(ValueError):
    """OUT cannot take an export; raised before anything is written."""


class PublishError(OSError):
    """The finished directory could not take OUT's name: something took it meanwhile."""


def _name(out: str) -> str:
    return out.rstrip(os.sep) or out


def check_out(out: str | os.PathLike) -> None:
    """:class:`OutError` unless OUT can take an export: absent or an empty writable directory
    (not a symlink), in an existing writable directory."""
    out = _name(os.fspath(out))
    if os.path.lexists(out):
        if os.path.islink(out) or not os.path.isdir(out):
            raise OutError(f"fp8_dummy export: {out} exists and is not a directory")
        if os.listdir(out):
            raise OutError(f"fp8_dummy export: {out} exists and is not empty (nothing changed)")
        why = directory_problem(out)
        if why is not None:
            raise OutError(f"fp8_dummy export: {why}")
    why = directory_problem(os.path.dirname(os.path.abspath(out)))
    if why is not None:
        raise OutError(f"fp8_dummy export: {out}: {why}")


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read by setting it (and putting it back)
    os.umask(mask)
    return mask


def _rename_noreplace(src: str, dst: str) -> None:
    """``src`` renamed to ``dst`` where nothing is at ``dst``; FileExistsError otherwise."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is not None:
        renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        renameat2.argtypes += [ctypes.c_uint]
        args = (_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
        if renameat2(*args) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), dst)
    # No renameat2 here (or not on this file system): a new empty directory taken first
    # (mkdir fails on anything there, a symlink included), then replaced by the rename,
    # which fails unless it is still an empty directory.
    os.mkdir(dst, 0o700)
    os.rename(src, dst)


@contextmanager
def staged(out: str | os.PathLike) -> Iterator[str]:
    """The staging directory to write OUT's files into; published as OUT when the block ends,
    removed if it raises (an interrupt included). :class:`PublishError` if OUT was taken
    meanwhile (nothing published, OUT as the other party left it)."""
    out = _name(os.fspath(out))
    parent = os.path.dirname(os.path.abspath(out))
    try:
        before = os.lstat(out)
    except FileNotFoundError:
        before = None
    mode = stat.S_IMODE(before.st_mode) if before is not None else 0o777 & ~_umask()
    stage = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.", suffix=".partial", dir=parent)
    try:
        yield stage
        os.chmod(stage, mode)
        try:
            if before is not None:  # an empty directory: replaced only while still one
                os.rename(stage, out)
            else:
                _rename_noreplace(stage, out)
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise PublishError(
                    e.errno,
                    f"fp8_dummy export: {out} was taken while the export ran (another export, "
                    "or a file or link put there): nothing published, it is left as it is",
                ) from None
            raise
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
