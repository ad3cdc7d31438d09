"""What ``python -m fp8_dummy export`` guarantees about OUT and the files it writes, tried as a
hostile or unlucky user would (docs/export.md, "What an export guarantees"): an export stopped
by a full disk, SIGINT or SIGKILL at the third of seven shards publishes nothing; OUT cannot be
raced (a symlink planted while the model is built, a second export into the same OUT); only
the checkpoint's files are copied from the config's directory, never through a symlink out of
it, with modes no wider than the source's; every bad input is one line (exit 2) before any
work. Every attack writes under the test's temporary directory only."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from fp8_dummy.realistic import export as E  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
SMALL.update(num_key_value_heads=2, vocab_size=256, model_type="llama")
SHARD = "40KB"  # seven shards of the small Llama
# The export's CLI in a child that meets SIGNAL when the third shard is being written.
# SIGINT as a terminal's Ctrl-C delivers it: a child of a background job starts with it
# ignored (and Python then installs no KeyboardInterrupt for it), so the child sets it.
STOPPER = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from fp8_dummy.realistic import export as E
calls, real = [], E.write_tensors
def stop(*a, **k):
    calls.append(1)
    if len(calls) == 3:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return real(*a, **k)
E.write_tensors = stop
sys.exit(E.main(sys.argv[2:]))
"""


def config_dir(tmp_path: Path, name: str = "config", **more) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**SMALL, **more}))
    return d


def child(tmp_path: Path, *args: str, preexec=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path,
        preexec_fn=preexec, timeout=300,
    )  # fmt: skip


def beside(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name != "config")


def test_the_small_model_has_seven_shards(tmp_path):
    E.export(config_dir(tmp_path), tmp_path / "out", shard_size=SHARD, progress=False)
    index = json.loads((tmp_path / "out" / E.INDEX).read_text())
    assert len(set(index["weight_map"].values())) == 7


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_export_stopped_by_a_signal_publishes_nothing(tmp_path, how):
    src = config_dir(tmp_path)
    p = child(tmp_path, "-c", STOPPER, how, str(src), "out", "--shard-size", SHARD, "--quiet")
    assert p.returncode == 130, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert (
        p.stderr.strip().splitlines()[-1]
        == "fp8_dummy export: interrupted: nothing published at out"
    )
    assert beside(tmp_path) == [], "no OUT and no staging directory"


def test_an_export_killed_leaves_only_a_private_staging_directory(tmp_path):
    src = config_dir(tmp_path)
    p = child(tmp_path, "-c", STOPPER, "SIGKILL", str(src), "out", "--shard-size", SHARD)
    assert p.returncode == -signal.SIGKILL
    (left,) = beside(tmp_path)  # no OUT: the staging directory only
    assert re.fullmatch(r"\.out\.\w+\.partial", left), left
    stage = tmp_path / left
    assert stat.S_IMODE(stage.stat().st_mode) == 0o700
    names = {p.name for p in stage.iterdir()}
    assert "config.json" not in names and E.INDEX not in names, names


def test_a_full_disk_is_one_line_exit_1_and_publishes_nothing(tmp_path):
    src = config_dir(tmp_path)
    E.export(src, tmp_path / "whole", shard_size=SHARD, progress=False)
    sizes = [p.stat().st_size for p in sorted((tmp_path / "whole").glob("model-*"))]
    assert sizes[2] > max(sizes[:2]), sizes
    limit = (sizes[2] + max(sizes[:2])) // 2  # a file's size limit the third shard reaches
    shutil.rmtree(tmp_path / "whole")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = ["-m", "fp8_dummy", "export", str(src), "out", "--shard-size", SHARD, "--quiet"]
    p = child(tmp_path, *args, preexec=small_files)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert "File too large" in line and "nothing published at out" in line, line
    assert beside(tmp_path) == []


def test_a_symlink_planted_at_out_while_the_model_is_built_is_refused(tmp_path, monkeypatch):
    src = config_dir(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "theirs.txt").write_text("theirs")
    out = tmp_path / "out"
    real = E.build_model

    def plant(*a, **k):
        os.symlink(victim, out)
        return real(*a, **k)

    monkeypatch.setattr(E, "build_model", plant)
    with pytest.raises(OSError, match="was taken while the export ran"):
        E.export(src, out, progress=False)
    assert out.is_symlink() and os.readlink(out) == str(victim)
    assert [p.name for p in victim.iterdir()] == ["theirs.txt"]
    assert sorted(beside(tmp_path)) == ["out", "victim"], "no staging directory left"


@pytest.mark.parametrize("existed", [False, True])
def test_a_second_export_into_the_same_out_fails_cleanly(tmp_path, monkeypatch, existed):
    """Two exports into one OUT (absent, or an empty directory): the first to finish is
    published whole; the other fails, naming why, and changes nothing."""
    src = config_dir(tmp_path)
    out = tmp_path / "out"
    if existed:
        out.mkdir()
    real = E.build_model
    nested = []

    def race(*a, **k):
        if not nested:
            nested.append(1)
            E.export(src, out, seed=5, progress=False)  # the other export, finished first
        return real(*a, **k)

    monkeypatch.setattr(E, "build_model", race)
    with pytest.raises(OSError, match="nothing published"):
        E.export(src, out, seed=4, progress=False)
    monkeypatch.setattr(E, "build_model", real)
    E.export(src, tmp_path / "alone", seed=5, progress=False)
    ours = {p.name: p.read_bytes() for p in out.iterdir()}
    assert ours == {p.name: p.read_bytes() for p in (tmp_path / "alone").iterdir()}
    assert sorted(beside(tmp_path)) == ["alone", "out"]


def test_the_command_line_says_a_lost_race_in_one_line(tmp_path, monkeypatch, capsys):
    src = config_dir(tmp_path)
    out = tmp_path / "out"
    real = E.build_model

    def plant(*a, **k):
        out.mkdir()
        (out / "x").write_text("")
        return real(*a, **k)

    monkeypatch.setattr(E, "build_model", plant)
    assert E.main([str(src), str(out), "--quiet"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "was taken while the export ran" in line


def test_an_empty_out_is_replaced_with_its_mode_and_files_get_the_umask(tmp_path):
    src = config_dir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o750)
    old = os.umask(0o027)
    try:
        E.export(src, out, progress=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    for p in out.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o640, p.name
    fresh = tmp_path / "fresh"
    E.export(src, fresh, progress=False)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o777 & ~old


def test_only_the_checkpoints_files_are_copied_with_their_modes(tmp_path):
    src = config_dir(tmp_path)
    private = tmp_path / "private"
    private.mkdir()
    (private / "secret.json").write_text('{"secret": "do not copy"}')
    (src / ".env").write_text("TOKEN=1")
    (src / ".env").chmod(0o600)
    (src / "tokenizer.json").write_text('{"tok": 1}')
    (src / "tokenizer.json").chmod(0o600)
    (src / "generation_config.json").write_text("{}")
    (src / "vocab.json").write_text("{}")
    os.symlink(src / "vocab.json", src / "merges.txt")  # a link inside the directory: copied
    os.symlink(private / "secret.json", src / "tokenizer_config.json")  # out of it: not
    for other in ("tf_model.h5", "flax_model.msgpack", "hf_quant_config.json", "README.md"):
        (src / other).write_text("{}")
    summary = E.export(src, tmp_path / "out", progress=False)
    out = tmp_path / "out"
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("model"))
    assert names == ["config.json", "generation_config.json", "merges.txt", "tokenizer.json",
                     "vocab.json"]  # fmt: skip
    assert stat.S_IMODE((out / "tokenizer.json").stat().st_mode) == 0o600
    assert not (out / "merges.txt").is_symlink()
    assert summary["left_out"] == [f"tokenizer_config.json (a symlink out of {src})"]
    for p in out.iterdir():
        assert b"do not copy" not in p.read_bytes()


def test_an_unreadable_file_of_the_checkpoint_is_refused_before_any_work(tmp_path, monkeypatch):
    src = config_dir(tmp_path)
    token = src / "tokenizer.json"
    token.write_text("{}")
    if os.geteuid() == 0:  # root reads a mode-000 file: the kernel's refusal, simulated

        def refusing(real):
            def opener(path, *a, **k):
                if isinstance(path, (str, Path)) and os.path.realpath(path) == str(token):
                    raise PermissionError(13, "Permission denied", str(path))
                return real(path, *a, **k)

            return opener

        monkeypatch.setattr("builtins.open", refusing(open))
        monkeypatch.setattr(os, "open", refusing(os.open))
    else:
        token.chmod(0)
    monkeypatch.setattr(E, "build_model", _never)
    assert E.main([str(src), str(tmp_path / "out"), "--quiet"]) == 2
    assert beside(tmp_path) == []


def _never(*a, **k):
    raise AssertionError("the model was built before the input was refused")


@pytest.mark.parametrize(
    "case",
    ["hidden -64", "hidden 0", "quantization a string", "quantization a list", "not JSON",
     "a JSON list", "read-only OUT", "read-only parent", "OUT a file", "unknown model_type"],
)  # fmt: skip
def test_every_bad_input_is_one_line_exit_2_before_any_work(tmp_path, capsys, monkeypatch, case):
    src = config_dir(tmp_path)
    out = tmp_path / "out"
    raw = json.loads((src / "config.json").read_text())
    if case.startswith("hidden"):
        raw["hidden_size"] = int(case.split()[1])
    elif case.startswith("quantization"):
        raw["quantization_config"] = "fp8" if case.endswith("string") else ["fp8"]
    elif case == "unknown model_type":
        raw["model_type"] = "no_such_model"
    (src / "config.json").write_text(json.dumps(raw))
    if case == "not JSON":
        (src / "config.json").write_text("{'model_type': 'llama'")
    elif case == "a JSON list":
        (src / "config.json").write_text("[1, 2]")
    elif case == "read-only OUT":
        out.mkdir()
        out.chmod(0o555)
    elif case == "read-only parent":
        out = tmp_path / "ro" / "out"
        out.parent.mkdir()
        out.parent.chmod(0o555)
    elif case == "OUT a file":
        out.write_text("mine")
    if not case.startswith(("hidden", "quantization")):
        monkeypatch.setattr(E, "build_model", _never)
    try:
        code = E.main([str(src), str(out), "--quiet"])
    finally:
        out.parent.chmod(0o755)
        if out.is_dir():
            out.chmod(0o755)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    if case == "OUT a file":
        assert out.read_text() == "mine"
    else:
        assert not out.exists() or not any(out.iterdir())
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".partial")]
