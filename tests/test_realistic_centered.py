"""Expert weights that take a non-negative activation only get rows of zero sum over their
inputs (docs/realistic.md#the-rule-per-architecture): the probe finds them by what the model
computes, not by a name; the bytes hold the rows' zero sums in every block and format, read
back from an export's files (decoded from the bits here, no fill code). The routing this
restores: tests/test_realistic_speculative.py (Nemotron-H's every MoE layer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)
from test_export import decode_e2m1_pairs, decode_e4m3, read_export  # noqa: E402

from fp8_dummy.realistic import Spec, derive, fill_  # noqa: E402
from fp8_dummy.realistic.export import export  # noqa: E402


def _nemotron_h() -> torch.nn.Module:
    return tf.AutoModelForCausalLM.from_config(H.config("nemotron_h", layers=3)).eval()


def test_the_probe_finds_non_negative_activations_by_what_they_compute(monkeypatch):
    """Nemotron-H's routed and shared experts' down_proj (squared ReLU, no gate), found alike
    on a poisoned model; with a signed activation in the same classes, none; a gated MoE's
    experts (Qwen3-MoE's act(gate) * up), none."""
    model = _nemotron_h()
    want = {f"model.layers.{i}.mixer.{w}" for i in (1, 3)
            for w in ("experts.down_proj", "shared_experts.down_proj.weight")}  # fmt: skip
    assert derive(model).centered == want
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    assert derive(model).centered == want
    for m in model.modules():
        if isinstance(getattr(m, "act_fn", None), torch.nn.Module):
            monkeypatch.setattr(m, "act_fn", torch.nn.GELU())  # signed: its minimum -0.17
    assert derive(model).centered == frozenset()
    qwen = tf.AutoModelForCausalLM.from_config(H.config("qwen3_moe")).eval()
    assert derive(qwen).centered == frozenset()


CASES = [(torch.float32, "uniform"), (torch.bfloat16, "uniform"), (torch.int8, "codes")]
CASES += [(torch.float8_e4m3fn, "uniform"), (torch.float8_e4m3fnuz, "uniform")]
CASES += [(torch.uint8, "codes")]  # FP4 codes two a byte


def _value(t: torch.Tensor) -> np.ndarray:
    """float64 values of a filled tensor: packed FP4 bytes decoded, two a byte."""
    if t.dtype == torch.uint8:
        return decode_e2m1_pairs(t.numpy())
    if t.dtype == torch.float8_e4m3fn:
        return decode_e4m3(t.view(torch.uint8).numpy())
    return t.double().numpy()


def _blocks(w: int) -> list[tuple[tuple, tuple, int]]:
    """(size, strides, offset) of blocks of a [7, w] tensor, as an engine's loader takes them:
    rows and a column range, strided columns, transposed, a selected row and column, and a
    flat run across rows (no box: the whole tensor made, the block taken)."""
    return [((3, w - w // 3), (w, 1), 2 * w + w // 3), ((7, (w + 1) // 2), (w, 2), 0),
            ((w, 7), (1, w), 0), ((max(w - 1, 1), 3), (1, w), 2 * w + min(1, w - 1)),
            ((w,), (1,), 3 * w), ((7,), (w,), w // 2),
            ((2 * w + 3,), (1,), 2)]  # fmt: skip


@pytest.mark.parametrize("dtype,kind", CASES, ids=[str(d) for d, _ in CASES])
@pytest.mark.parametrize("width", [10, 11, 1, 2])
def test_rows_of_zero_sum_in_every_block(dtype, kind, width):
    """A centered spec: each row's second half the first's negated (an odd middle 0), its sum
    0 exactly; any block the whole tensor's bytes there."""
    low, high = (0, 256) if dtype == torch.uint8 else (-5, 6) if kind == "codes" else (-1.0, 1.0)
    spec = Spec("residual_out", kind, low, high, -1)
    whole = fill_(torch.empty(7, width, dtype=dtype), spec, 11)
    v = _value(whole)
    pairs = v.reshape(7, width, -1)  # FP4's: the two codes a byte, mirrored with their byte
    half = width // 2
    assert np.array_equal(pairs[:, :half], -pairs[:, half : 2 * half])
    assert (pairs[:, 2 * half :] == 0).all()
    assert (np.abs(v.sum(1)) == 0).all() and (width < 2 or np.abs(v).sum() > 0)
    assert not np.array_equal(v[0], v[1]) or width < 2
    flat = whole.view(torch.uint8).reshape(-1) if dtype.itemsize == 1 else whole.reshape(-1)
    for size, strides, offset in _blocks(width):
        block = torch.empty(size, dtype=dtype)
        fill_(block, spec, 11, element_offset=offset, element_strides=list(strides),
              logical_shape=(7, width))  # fmt: skip
        got = block.view(torch.uint8) if dtype.itemsize == 1 else block
        assert torch.equal(got, flat.as_strided(size, strides, offset)), (size, strides, offset)


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "fp8-block", "nvfp4"])
def test_an_export_holds_the_zero_sums(fmt, tmp_path):
    """From an export's files: every routed and shared expert's down_proj row (the MTP step's
    too) sums to zero in its format's values; their up_proj rows do not (but by chance)."""
    cfg = H.config("nemotron_h", layers=3, mtp=1)
    cfg.save_pretrained(tmp_path / "c")
    kw = dict(format=fmt, routing="zipf:1.2", allow_unknown=True)  # Mamba's A_log and D
    export(tmp_path / "c", tmp_path / "o", progress=False, **kw)
    t = read_export(tmp_path / "o")
    names = [n[: -len(".weight")] for n in t if n.endswith("_proj.weight") and "experts" in n]
    assert len(names) == 2 * 3 * 17  # up and down, three MoE layers (an MTP step's one)
    for name in names:
        w = t[f"{name}.weight"]
        if fmt == "nvfp4":
            blocks = decode_e4m3(t[f"{name}.weight_scale"].view(torch.uint8).numpy())
            value = decode_e2m1_pairs(w.numpy()) * np.repeat(blocks, 16, axis=1)
        elif fmt.startswith("fp8"):
            value = decode_e4m3(w.view(torch.uint8).numpy())  # one scale a row: it factors out
        else:
            value = w.double().numpy()
        sums = np.abs(value.sum(1))
        if name.endswith("down_proj"):
            assert (sums == 0).all() and np.abs(value).sum() > 0, name
        else:  # FP4's few codes: a row can sum to 0 by chance
            assert (sums > 0).mean() > 0.9, name
