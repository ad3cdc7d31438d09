"""The files an export copies from the config's directory: an allow-list of what a checkpoint
holds beside its weights and config (the tokenizer, the generation config, the chat template,
a processor's config), read before anything is written and copied with modes no wider than
the source's (nor the umask). Nothing else: no other framework's weights, no quantization
sidecar (``hf_quant_config.json``: an engine would read the export as quantized that way; the
export's own ``config.json`` says its format), no hidden or unknown file. Never through a
symlink that leaves the directory, never from anything but a regular file."""

from __future__ import annotations

import os
import re
import stat
from typing import NamedTuple

__all__ = ["ALLOWED", "Copy", "gather"]

ALLOWED = re.compile(
    r"^(?:generation_config\.json|tokenizer\.json|tokenizer_config\.json|tokenizer\.model"
    r"|special_tokens_map\.json|added_tokens\.json|vocab\.json|vocab\.txt|merges\.txt"
    r"|spiece\.model|sentencepiece\.bpe\.model|[\w.-]+\.tiktoken|chat_template\.jinja"
    r"|chat_template\.json|preprocessor_config\.json|processor_config\.json)$"
)


class Copy(NamedTuple):
    """A file to write into the checkpoint: its name, bytes and mode (before the umask)."""

    name: str
    data: bytes
    mode: int


class UnreadableError(ValueError):
    """A file the checkpoint would hold that cannot be read; raised before anything is written."""


def gather(folder: str) -> tuple[list[Copy], list[str]]:
    """(the files to copy, read now; what was left out of the allow-list's and why)."""
    copies, left = [], []
    root = os.path.realpath(folder)
    for name in sorted(os.listdir(folder)):
        if not ALLOWED.match(name):
            continue
        path = os.path.join(folder, name)
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root:
            left.append(f"{name} (a symlink out of {folder})")
            continue
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            left.append(f"{name} (a dangling symlink)")
            continue
        except OSError as e:
            raise UnreadableError(
                f"fp8_dummy export: {path} cannot be read ({e.strerror}); the checkpoint "
                "would hold it"
            ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                left.append(f"{name} (not a regular file)")
                continue
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read()
        except OSError as e:
            raise UnreadableError(f"fp8_dummy export: {path} cannot be read ({e})") from None
        finally:
            os.close(fd)
        copies.append(Copy(name, data, stat.S_IMODE(st.st_mode) & 0o666))
    return copies, left
