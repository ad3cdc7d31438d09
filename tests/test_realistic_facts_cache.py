"""The architecture facts' disk cache (fp8_dummy/realistic/facts_cache.py): a logical checkpoint
made with the cache cold, warm, corrupt, planted by another user, writable by others, behind
a symlink, of another environment, or faulted is byte for byte the one made without the cache
(every tensor's bytes, names, shapes, dtypes, the quantization config); a warm cache skips the
twin (its builds are counted); a record not believed is probed again, with one warning where
someone else could have written it, and never written through. Another user is simulated by
os.chown where the tests run as root, else skipped (permission bits are tested as well)."""

from __future__ import annotations

import json
import os
import random
import stat
import warnings
from pathlib import Path

import pytest
import torch

from fp8_dummy import _trusted_cache
from fp8_dummy.realistic import arch as arch_module
from fp8_dummy.realistic import facts_cache
from fp8_dummy.realistic.arch import Arch
from fp8_dummy.realistic.kept import config_checkpoint, forget

pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")
from helpers import realistic_sweep as sweep  # noqa: E402
from helpers.folder_snapshot import snapshot  # noqa: E402

ROOT = os.geteuid() == 0
OTHER = 54321  # another user's uid
as_root = pytest.mark.skipif(not ROOT, reason="chown to another uid needs root")
# Qwen3-MoE (a fused experts tensor, a combine sum of 1), Gemma 2 (offsets, post-norms, the
# embedding's multiplier), PhiMoE (a combine sum the stand-ins' values decide)
KINDS = ["qwen3_moe", "gemma2", "phimoe"]


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("FP8_DUMMY_FACTS_CACHE", "1")
    monkeypatch.delenv("FP8_DUMMY_FAULT", raising=False)
    monkeypatch.setattr(_trusted_cache, "_warned", set())
    forget()
    yield
    forget()


@pytest.fixture
def builds(monkeypatch) -> list:
    """The twins built so far (each a probe of the facts)."""
    made: list = []
    build = arch_module.build_twin

    def counted(*args, **kwargs):
        made.append(args[0])
        return build(*args, **kwargs)

    monkeypatch.setattr(arch_module, "build_twin", counted)
    return made


def config_of(kind: str, quant: bool, rng: random.Random):
    """A small config of ``kind``: random layer and expert counts."""
    config = sweep.small_config(kind, rng.randint(2, 3))
    if kind == "qwen3_moe":
        config.num_experts = rng.choice([4, 6, 8])
        config.mlp_only_layers = [0] if rng.random() < 0.5 else []
    if quant:
        config.quantization_config = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                      "weight_block_size": [16, 16]}  # fmt: skip
    return config


def checkpoint(config, quiet: bool = True) -> dict:
    """Every tensor of ``config``'s logical checkpoint, made afresh: name -> (shape, dtype,
    bytes), and the quantization config; ``quiet``: its warnings silenced."""
    forget()
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        made = config_checkpoint(config)
    out = {}
    for name, t in made.items():
        if type(t) is not torch.Tensor:  # a stand-in: the whole tensor written here
            t = made.fill(name, torch.empty(tuple(t.shape), dtype=t.dtype))
        out[name] = (tuple(t.shape), t.dtype, t.contiguous().view(torch.uint8).reshape(-1).clone())
    forget()
    return {"tensors": out, "quantization": made.quantization_config()}


def same(a: dict, b: dict) -> bool:
    try:
        assert_same(a, b)
    except AssertionError:
        return False
    return True


def assert_same(a: dict, b: dict) -> None:
    assert a["quantization"] == b["quantization"]
    assert list(a["tensors"]) == list(b["tensors"])
    for name, (shape, dtype, data) in a["tensors"].items():
        other = b["tensors"][name]
        assert (shape, dtype) == other[:2], name
        assert torch.equal(data, other[2]), f"{name}: other bytes"


def uncached(config, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        m.setenv("FP8_DUMMY_FACTS_CACHE", "0")
        return checkpoint(config)


def records() -> list[Path]:
    folder = facts_cache.directory()
    return sorted(folder.iterdir()) if folder.exists() else []


def made_with_warnings(config) -> tuple[dict, list[str]]:
    """(the checkpoint, the cache's warnings while it was made)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = checkpoint(config, quiet=False)
    return out, [str(w.message) for w in caught if "facts cache" in str(w.message)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("quant", [False, True], ids=["bf16", "fp8-block"])
def test_cold_and_warm_give_the_uncached_bytes_and_warm_skips_the_twin(
    kind, quant, builds, monkeypatch
):
    config = config_of(kind, quant, random.Random(f"{kind}{quant}"))
    plain = uncached(config, monkeypatch)
    probed = len(builds)
    assert probed >= 1 and not records()
    cold = checkpoint(config)
    assert len(builds) == 2 * probed  # cold: probed, then written
    files = records()
    assert len(files) == probed
    assert stat.S_IMODE(facts_cache.directory().stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    warm = checkpoint(config)
    assert len(builds) == 2 * probed  # warm: no twin built
    assert_same(plain, cold)
    assert_same(plain, warm)


def test_another_config_or_dtype_is_another_record(builds):
    config = config_of("qwen3_moe", False, random.Random(1))
    checkpoint(config)
    config.num_experts += 2
    checkpoint(config)
    assert len(builds) == 2 and len(records()) == 2
    model = type(config)
    assert facts_cache.key(model, config, torch.bfloat16) != facts_cache.key(
        model, config, torch.float32
    )


@pytest.mark.parametrize(
    "damage", ["not json", "torn", "not an object", "a field's type", "another key",
               "another environment", "too long", "too deep", "infinite"],
)  # fmt: skip
def test_a_damaged_record_is_probed_again_and_replaced(damage, builds, monkeypatch):
    config = config_of("gemma2", False, random.Random(2))
    plain = uncached(config, monkeypatch)
    checkpoint(config)
    (path,) = records()
    good = path.read_bytes()
    record = json.loads(good)
    if damage == "not json":
        path.write_bytes(b"\x00\xff not json")
    elif damage == "torn":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "not an object":
        path.write_text(json.dumps([record["value"]]))
    elif damage == "a field's type":
        record["value"]["offset"] = {name: str(c) for name, c in record["value"]["offset"].items()}
        assert record["value"]["offset"], "gemma2's norms have offsets"
        path.write_text(json.dumps(record))
    elif damage == "another key":
        record["key"] = record["key"].replace("Gemma2", "Gemma3")
        path.write_text(json.dumps(record))
    elif damage == "another environment":
        record["environment"][1][0] = "0.0.0"  # another torch
        path.write_text(json.dumps(record))
    elif damage == "too deep":  # JSON's reader recurses: no RecursionError reaches a caller
        path.write_bytes(b"[" * 60_000)
    elif damage == "infinite":  # JSON's reader takes Infinity; store never writes it
        record["value"]["embed_scale"] = float("inf")
        path.write_text(json.dumps(record))
    else:
        path.write_bytes(good + b" " * (1 << 16))
    probed = len(builds)
    assert_same(plain, checkpoint(config))
    assert len(builds) == probed + 1  # not believed: probed again
    assert path.read_bytes() == good  # and replaced by the probe's record


def planted_lie(config, monkeypatch) -> tuple[dict, Path]:
    """(the uncached checkpoint, its record) after the record was made to lie (another
    embedding multiplier: other bytes where believed)."""
    plain = uncached(config, monkeypatch)
    checkpoint(config)
    (path,) = records()
    lie = json.loads(path.read_text())
    lie["value"]["embed_scale"] = 3.0
    path.write_text(json.dumps(lie))
    return plain, path


@as_root
@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_record_another_user_could_have_written_is_not_believed(what, builds, monkeypatch):
    config = config_of("qwen3_moe", True, random.Random(3))
    plain, path = planted_lie(config, monkeypatch)
    assert not same(checkpoint(config), plain)  # believed: other bytes
    os.chown(path if what == "file" else path.parent, OTHER, -1)
    before = snapshot(path.parent.parent)
    probed = len(builds)
    made, warned = made_with_warnings(config)
    assert_same(plain, made)
    assert len(builds) == probed + 1
    assert len(warned) == 1 and f"uid {OTHER}" in warned[0], warned
    if what == "directory":
        assert snapshot(path.parent.parent) == before  # nothing written into it
    assert made_with_warnings(config)[1] == []  # one warning per process


@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_record_others_can_write_is_not_believed(what, builds, monkeypatch):
    config = config_of("qwen3_moe", False, random.Random(4))
    plain, path = planted_lie(config, monkeypatch)
    (path if what == "file" else path.parent).chmod(0o666 if what == "file" else 0o777)
    probed = len(builds)
    made, warned = made_with_warnings(config)
    assert_same(plain, made)
    assert len(builds) == probed + 1
    assert len(warned) == 1 and "writable by its group or others" in warned[0], warned


def test_a_symlink_at_the_records_name_is_never_read_nor_written_through(
    tmp_path, builds, monkeypatch
):
    config = config_of("phimoe", False, random.Random(5))
    plain = uncached(config, monkeypatch)
    checkpoint(config)
    (path,) = records()
    elsewhere = tmp_path / "elsewhere.json"
    lie = json.loads(path.read_text())
    lie["value"]["embed_scale"] = 5.0
    elsewhere.write_text(json.dumps(lie))
    elsewhere.chmod(0o600)
    before = elsewhere.read_bytes()
    path.unlink()
    path.symlink_to(elsewhere)
    probed = len(builds)
    made, warned = made_with_warnings(config)
    assert_same(plain, made)
    assert len(builds) == probed + 1
    assert len(warned) == 1 and "cannot be read" in warned[0], warned
    assert elsewhere.read_bytes() == before  # the link replaced, its target untouched
    assert not path.is_symlink() and json.loads(path.read_text())["value"]["embed_scale"] == 1.0


def test_a_symlinked_folder_is_not_used(tmp_path, builds, monkeypatch):
    config = config_of("qwen3_moe", False, random.Random(6))
    plain = uncached(config, monkeypatch)
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    folder = facts_cache.directory()
    folder.parent.mkdir(parents=True)
    folder.symlink_to(real)
    made, warned = made_with_warnings(config)
    assert_same(plain, made)
    assert len(warned) == 1 and "is a symlink" in warned[0], warned
    assert list(real.iterdir()) == []  # nothing written through the link
    made, _ = made_with_warnings(config)
    assert len(builds) == 3  # uncached, then probed at each load: never read either


@pytest.mark.parametrize("switch", ["FP8_DUMMY_FAULT", "FP8_DUMMY_FACTS_CACHE"])
def test_a_faulted_or_switched_off_run_neither_reads_nor_writes(switch, builds, monkeypatch):
    config = config_of("qwen3_moe", False, random.Random(7))
    checkpoint(config)
    (path,) = records()
    good = path.read_bytes()
    monkeypatch.setenv(switch, "kill" if switch == "FP8_DUMMY_FAULT" else "0")
    path.unlink()
    checkpoint(config)
    checkpoint(config)
    assert len(builds) == 3 and records() == []
    monkeypatch.delenv(switch)
    checkpoint(config)
    assert records()[0].read_bytes() == good


def test_facts_of_a_failed_probe_are_not_kept(builds, monkeypatch):
    config = config_of("qwen3_moe", False, random.Random(8))

    def fails(model, layers, failed, **kwargs):
        failed.append("the combine probe failed here")
        return {}

    monkeypatch.setattr(arch_module, "combine_gains", fails)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            checkpoint(config, quiet=False)
        assert any("the combine probe failed here" in str(w.message) for w in caught)
    assert len(builds) == 2 and records() == []  # probed, and warned, at each load


def test_a_class_of_remote_code_is_not_cached():
    config = config_of("qwen3_moe", False, random.Random(9))
    remote = type(
        "Qwen3MoeForCausalLM", (torch.nn.Module,), {"__module__": "transformers_modules.x"}
    )
    assert facts_cache.key(remote, config, torch.bfloat16) is None


def test_only_facts_that_read_back_as_themselves_are_stored():
    import numpy as np

    full = Arch(1.5, frozenset({"a", "b"}), {"n": 1.0}, frozenset({"r"}), frozenset({"g"}),
                {"m": 8}, frozenset({"c"}), {"k": 0.125})  # fmt: skip
    key = "a key"
    assert facts_cache.store(key, full) is not None
    assert facts_cache.load(key, Arch) == full
    got = facts_cache.load(key, Arch)
    assert type(got.combine["m"]) is int and type(got.offset["n"]) is float
    for odd in (full._replace(embed_scale=np.float64(1.5)), full._replace(embed_scale=float("inf")),
                full._replace(combine={"m": torch.tensor(8.0)})):  # fmt: skip
        assert facts_cache.store("another key", odd) is None
    assert facts_cache.load("another key", Arch) is None


def test_a_package_source_that_cannot_be_read_turns_the_cache_off(builds, monkeypatch):
    """An editor's dangling lock file, a source gone mid-upgrade: the sources' hash, part of
    every record, cannot be made, so nothing is read or written, and the load goes on."""
    config = config_of("gemma2", False, random.Random(11))
    plain = uncached(config, monkeypatch)
    read = Path.read_bytes

    def unreadable(path):
        if path.name == "arch.py":
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return read(path)

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    facts_cache._sources_hash.cache_clear()
    try:
        assert not facts_cache.enabled()
        assert_same(plain, checkpoint(config))
        assert_same(plain, checkpoint(config))
    finally:
        facts_cache._sources_hash.cache_clear()
    assert records() == [] and len(builds) == 3


def test_a_library_that_cannot_be_hashed_is_not_cached(builds, monkeypatch):
    """A constant in place of the library's hash would match a rebuild: no record instead."""
    config = config_of("gemma2", False, random.Random(12))
    monkeypatch.setattr(_trusted_cache, "library_hash", lambda: "")
    plain = uncached(config, monkeypatch)
    assert_same(plain, checkpoint(config))
    assert_same(plain, checkpoint(config))
    assert records() == [] and len(builds) == 3


def test_without_an_absolute_folder_nothing_is_written_anywhere(builds, monkeypatch, tmp_path):
    """A relative XDG_CACHE_HOME is ignored (as XDG says) and a home that is not absolute is no
    folder: one warning, nothing written under the server's working directory."""
    config = config_of("gemma2", False, random.Random(13))
    plain = uncached(config, monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: Path("~")))
    assert facts_cache.directory() is None
    made, said = made_with_warnings(config)
    assert_same(plain, made)
    assert any("no absolute cache folder" in w for w in said), said
    assert list(work.iterdir()) == []


def test_the_callers_generator_is_left_as_a_warm_read_leaves_it(builds):
    """Nemotron-H's class draws from torch's generator while its twin is built: a cold load
    leaves the caller's generator where a warm one does (untouched)."""
    config = config_of("nemotron_h", False, random.Random(14))
    for _ in range(2):  # cold, then warm
        torch.manual_seed(7)
        before = torch.get_rng_state()
        checkpoint(config)
        assert torch.equal(torch.get_rng_state(), before)
    assert len(builds) == 1 and len(records()) == 1


def test_a_class_patched_in_this_process_is_another_record(monkeypatch):
    """A kernel library that replaces a module class's forward keeps its name: the key holds
    each module class's forward too."""
    from transformers import Qwen3MoeForCausalLM

    config = config_of("qwen3_moe", False, random.Random(15))
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    before = facts_cache.key(Qwen3MoeForCausalLM, config, torch.bfloat16, model)
    assert before == facts_cache.key(Qwen3MoeForCausalLM, config, torch.bfloat16, model)

    def forward(self, x):
        return x

    monkeypatch.setattr(torch.nn.Linear, "forward", forward)
    assert facts_cache.key(Qwen3MoeForCausalLM, config, torch.bfloat16, model) != before
    config._attn_implementation = "eager"
    eager = facts_cache.key(Qwen3MoeForCausalLM, config, torch.bfloat16, model)
    config._attn_implementation = "sdpa"
    assert facts_cache.key(Qwen3MoeForCausalLM, config, torch.bfloat16, model) != eager
