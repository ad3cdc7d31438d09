"""Every file the package writes (an export's files, the routing report, ``check --json``, a
proof's verdict, the benchmarks' results) is written here: into a fresh temporary file of an
unpredictable name in the file's own directory, created ``O_EXCL | O_NOFOLLOW`` (so neither a
planted file nor a planted symlink is ever written through), then renamed over the name, which
replaces the name itself, never what a symlink there points to. A reader sees the whole file or
none; a failure leaves no temporary behind. :func:`target_problem` says before any work whether
a path can be written at all, so that a command refuses it up front instead of failing at the
end."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable

__all__ = ["directory_problem", "target_problem", "write_file"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def write_file(
    path: str | os.PathLike,
    data: bytes | Callable[[int], None],
    *,
    mode: int = 0o666,
    dir_fd: int | None = None,
) -> None:
    """``data`` (bytes, or a function writing into the open descriptor it is given) written
    to ``path`` atomically; ``mode`` before the umask; ``dir_fd``: ``path`` is a name in that
    open directory."""
    path = os.fspath(path)
    if dir_fd is None:
        folder, name = os.path.split(path)
        where = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        name, where = path, dir_fd
    tmp = f".{name[:200]}.{secrets.token_hex(8)}.tmp"
    created = False
    try:
        fd = os.open(tmp, _CREATE, mode, dir_fd=where)
        created = True
        try:
            data(fd) if callable(data) else _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=where, dst_dir_fd=where)
        created = False
    finally:
        if created:
            try:
                os.unlink(tmp, dir_fd=where)
            except OSError:
                pass
        if dir_fd is None:
            os.close(where)


def directory_problem(folder: str | os.PathLike) -> str | None:
    """None where files can be made in ``folder``; else why not: it does not exist, is no
    directory, or is read-only (no write permission for this process, or none for its owner:
    a directory its owner made read-only is refused even to root)."""
    folder = os.fspath(folder) or "."
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return f"the directory {folder} does not exist"
    except OSError as e:
        return f"the directory {folder} cannot be read ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a directory"
    if not os.access(folder, os.W_OK | os.X_OK) or not st.st_mode & stat.S_IWUSR:
        return f"the directory {folder} is not writable"
    return None


def target_problem(path: str | os.PathLike) -> str | None:
    """None where :func:`write_file` can write ``path``; else why not (the path is a
    directory or another non-file, or its directory cannot take a file)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return f"{path} is a directory; name a file"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return f"{path} cannot be read ({e.strerror})"
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        return f"{path} exists and is not a regular file"
    return directory_problem(os.path.dirname(path))
