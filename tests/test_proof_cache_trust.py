"""The on-disk proof cache (fp8_dummy/_verdict_cache.py) under attack: another user's
directory or file, group- or world-writable ones, symlinks at the temporary and the final
names, an unwritable cache, verdicts of the wrong type, of another key or environment, of a
faulted run, of another build. Each test plants what an attacker or a careless setup would,
then asks for a verdict in this process (the probe, a stand-in of
tests/helpers/isolated_probes.py, runs in a child that marks a file: the children are
counted) and compares every file it must not write byte for byte. Another user is simulated
by os.chown where the tests run as root, else skipped (permission bits are tested as well).
Slow: each child is a fresh Python."""

from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path

import pytest
from helpers.folder_snapshot import snapshot

from fp8_dummy import _isolated, _trusted_cache
from fp8_dummy import _verdict_cache as cache

pytestmark = pytest.mark.slow
ROOT = os.geteuid() == 0
OTHER = 54321  # another user's uid
as_root = pytest.mark.skipif(not ROOT, reason="chown to another uid needs root")
KEY = "vllm: stand-in engine trust"


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FP8_DUMMY_FAULT", raising=False)
    monkeypatch.setattr(_trusted_cache, "_warned", set())


def ask(tmp_path: Path, probe: str = "holds") -> tuple[str | None, int, list[str]]:
    """(the verdict, how many children have run so far, the warnings of this call)."""
    marker = tmp_path / "children.txt"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        why = _isolated.verdict(KEY, f"helpers.isolated_probes:{probe}", [str(marker)], "cpu")
    children = len(marker.read_text().splitlines()) if marker.exists() else 0
    return why, children, [str(w.message) for w in caught]


def proofs() -> Path:
    return cache.directory()


def verdict_file() -> Path:
    return proofs() / cache.file_name(KEY, cache.identity("cpu"))


def plant(detail, *, key: str = KEY, env=None, mode: int = 0o600) -> Path:
    """A verdict file at the name the library reads, in a directory made as the library does."""
    proofs().mkdir(parents=True, exist_ok=True, mode=0o700)
    path = verdict_file()
    env = cache.identity("cpu") if env is None else env
    path.write_text(json.dumps({"key": key, "environment": env, "value": detail}))
    path.chmod(mode)
    return path


def test_a_clean_runs_verdict_is_not_used_by_a_faulted_run_nor_by_another_build(
    tmp_path, monkeypatch
):
    assert ask(tmp_path, "holds")[:2] == (None, 1)
    assert ask(tmp_path, "holds")[:2] == (None, 1)  # cached: no child
    before = snapshot(tmp_path / "cache")
    monkeypatch.setenv("FP8_DUMMY_FAULT", "vllm")  # a faulted run proves in its own child
    why, children, _ = ask(tmp_path, "differs")
    assert why is not None and "first differing byte" in why and children == 2
    assert "FP8_DUMMY_FAULT" in why and snapshot(tmp_path / "cache") == before  # nothing written
    monkeypatch.delenv("FP8_DUMMY_FAULT")
    monkeypatch.setattr(cache, "library_hash", lambda: "a rebuilt extension")
    why, children, _ = ask(tmp_path, "differs")  # a rebuilt library proves again
    assert children == 3 and why is not None and "first differing byte" in why


def test_a_faulted_runs_refusal_does_not_outlive_the_fault(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8_DUMMY_FAULT", "vllm")
    why, children, _ = ask(tmp_path, "differs")
    assert why is not None and children == 1
    assert snapshot(tmp_path / "cache") == {}  # no verdict written, not even a directory
    monkeypatch.delenv("FP8_DUMMY_FAULT")
    assert ask(tmp_path, "holds")[:2] == (None, 2)  # the clean run proves, and it holds


@pytest.mark.parametrize(
    "attack",
    [
        pytest.param("directory of another user", marks=as_root),
        "directory writable by others",
        "directory writable by the group",
        pytest.param("file of another user", marks=as_root),
        "file writable by others",
    ],
)
def test_a_verdict_another_user_could_have_written_is_not_believed(tmp_path, attack):
    path = plant("")  # "proven", for a probe that differs
    if attack == "directory of another user":
        os.chown(proofs(), OTHER, OTHER)
        os.chown(path, OTHER, OTHER)
    elif attack.startswith("directory writable"):
        proofs().chmod(0o777 if "others" in attack else 0o770)
    elif attack == "file of another user":
        os.chown(path, OTHER, OTHER)
    else:
        path.chmod(0o666)
    before = snapshot(tmp_path / "cache")
    why, children, warned = ask(tmp_path, "differs")
    assert why is not None and "first differing byte" in why and children == 1, why
    assert len(warned) == 1 and str(proofs()) in warned[0], warned
    if attack.startswith("directory"):  # an untrusted directory is never written
        assert snapshot(tmp_path / "cache") == before
    else:  # our own directory: the file replaced by ours, believed at the next start
        st = path.lstat()
        assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o600
        assert json.loads(path.read_text())["value"].startswith("first differing byte")
    assert ask(tmp_path, "differs")[1] == (2 if attack.startswith("directory") else 1)


def test_the_directory_is_created_private_and_the_file_is_ours(tmp_path):
    assert ask(tmp_path, "holds")[:2] == (None, 1)
    st = proofs().lstat()
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    (path,) = proofs().iterdir()
    assert path == verdict_file() and stat.S_IMODE(path.lstat().st_mode) == 0o600


def test_the_temporary_file_is_unpredictable_and_no_symlink_is_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"the victim's own file\n")
    proofs().mkdir(parents=True, mode=0o700)
    name = verdict_file().name
    # the names a predictable writer would use: pid-based temporaries, the final name
    for n in (f".{name}.{os.getpid()}.tmp", f".{name}.tmp", name):
        (proofs() / n).symlink_to(victim)
    assert ask(tmp_path, "differs")[1] == 1
    assert victim.read_bytes() == b"the victim's own file\n"
    path = verdict_file()
    assert not path.is_symlink() and path.lstat().st_uid == os.geteuid()
    assert json.loads(path.read_text())["value"].startswith("first differing byte")
    left = sorted(p.name for p in proofs().iterdir())
    assert left == sorted([name, f".{name}.{os.getpid()}.tmp", f".{name}.tmp"])  # theirs only


def test_reading_never_follows_a_symlink_at_the_verdicts_name(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    env = cache.identity("cpu")
    elsewhere.write_text(json.dumps({"key": KEY, "environment": env, "value": ""}))
    elsewhere.chmod(0o600)
    proofs().mkdir(parents=True, mode=0o700)
    verdict_file().symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    why, children, warned = ask(tmp_path, "differs")
    assert why is not None and children == 1 and len(warned) == 1, warned
    assert elsewhere.read_bytes() == before and not verdict_file().is_symlink()


def test_an_unwritable_cache_costs_a_warning_never_the_verdict(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"a file where the cache would be\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    why, children, warned = ask(tmp_path, "holds")
    assert why is None and children == 1  # proven: the probe held
    assert len(warned) == 1 and "not cached" in warned[0], warned
    assert blocker.read_bytes() == b"a file where the cache would be\n"
    why, children, warned = ask(tmp_path, "holds")
    assert why is None and children == 2 and not warned  # one warning per process


@pytest.mark.parametrize("detail", [None, False, 0, [], {"why": "x"}])
def test_a_verdict_of_the_wrong_type_is_ignored_and_replaced(tmp_path, detail):
    path = plant(detail)
    why, children, _ = ask(tmp_path, "holds")
    assert why is None and children == 1  # proved again: it holds
    assert json.loads(path.read_text())["value"] == ""  # replaced
    assert ask(tmp_path, "holds")[:2] == (None, 1)


@pytest.mark.parametrize("field", ["key", "environment", "not json", "not an object"])
def test_a_verdict_of_another_key_or_environment_is_not_believed(tmp_path, field):
    path = plant("", key="x") if field == "key" else plant("", env=["another", "machine"])
    if field == "not json":
        path.write_text('{"key": "' + KEY + '", "det')
    elif field == "not an object":
        path.write_text('[""]')
    why, children, _ = ask(tmp_path, "differs")
    assert why is not None and "first differing byte" in why and children == 1
    record = json.loads(path.read_text())
    assert record["key"] == KEY and record["environment"] == cache.identity("cpu")


def test_the_identity_names_the_build_torch_the_device_and_the_fault(monkeypatch):
    import torch

    import fp8_dummy

    (version, digest), torch_build, device, fault = cache.identity("cpu")
    assert version == fp8_dummy.__version__ and len(digest) == 64
    assert torch_build[0] == torch.__version__ and torch_build[1] == torch.version.git_version
    assert device[0] == "cpu" and fault == ""
    monkeypatch.setenv("FP8_DUMMY_FAULT", "vllm")
    assert cache.identity("cpu")[-1] == "vllm"
