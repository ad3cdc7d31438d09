"""Speculative decoding by the weights measured through code nobody here wrote (the slow tier;
docs/realistic.md#speculative-decoding): transformers' own MTP generation
(``generate(use_mtp=True)``: DeepSeek-V3, GLM-4.5, Mellum and Inkling, whose configs declare MTP
layers) and assisted generation with a draft model exported by ``export --draft``, greedy, four
prompts of 150 generated tokens each (400 where most drafts are accepted); the acceptance per
position (given the position before was accepted) within 0.05 of the designed one for A in {0.3,
0.6, 0.9}, per-position lists at two and three MTP layers, and configs of other sizes,
vocabularies and draft lengths; without an acceptance, chance. Qwen3-Next, Qwen3.5,
GLM-4.7-Flash, ERNIE 4.5 MoE, EXAONE-MoE, HY-V3, MiMo-V2-Flash and MiniMax-M3 (their configs
declare no ``num_mtp_layers``), Bailing's hybrid (as Ling-2.5's and Ling-3.0's engine classes
compute their MTP layer) and Nemotron-H (stateful models, which transformers' assisted generation
refuses), whose MTP transformers cannot run, through an independent forward
of their MTP layer (tests/helpers/speculative_forward.py). With sampling at temperature 1: the
next-token entropy between 1 nat and 80% of ln(vocabulary), and the acceptance reported.
``pytest -s`` prints the numbers docs/realistic.md records."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)
from helpers.speculative_forward import independent_mtp_acceptance  # noqa: E402

from fp8_dummy.realistic import parse_acceptance  # noqa: E402
from fp8_dummy.realistic.export import main as export_main  # noqa: E402

pytestmark = pytest.mark.slow


def _wanted(acceptance) -> list[float]:
    """The designed acceptance per position, given the position before was accepted."""
    a = parse_acceptance(acceptance)
    k = a.positions or 1
    return [a.reach(i) / a.reach(i - 1) for i in range(1, k + 1)]


def _report(what: str, got: list[float], want: list[float], steps: int) -> None:
    print(f"\n{what}: measured {[round(g, 3) for g in got]}, designed "
          f"{[round(w, 3) for w in want]}, {steps} steps")  # fmt: skip
    assert all(abs(g - w) <= 0.05 for g, w in zip(got, want)), (what, got, want)


MTP = ("deepseek_v3", "glm4_moe", "mellum", "inkling_text")  # transformers runs their MTP
CASES = [(arch, a, 1) for arch in MTP for a in (0.3, 0.6, 0.9)]
CASES += [("deepseek_v3", "0.9,0.5", 2), ("glm4_moe", "0.8,0.6,0.4", 3)]
CASES += [("inkling_text", "0.9,0.5", 2)]


def _config(arch: str, mtp_layers: int, **kw):
    if arch in H.MORE:
        return H.config(arch, mtp=mtp_layers, **kw)
    return H.config(arch, num_nextn_predict_layers=mtp_layers, **kw)


@pytest.mark.parametrize("arch,acceptance,layers", CASES)
def test_transformers_mtp_generation(arch, acceptance, layers, tmp_path, monkeypatch):
    out = H.export(_config(arch, layers), tmp_path, acceptance)
    m = H.mtp_acceptance(out, layers, monkeypatch)
    want = _wanted(acceptance) if layers > 1 else [float(acceptance)]
    _report(f"{arch} MTP x{layers}, A={acceptance}", H.conditional(m, layers), want, len(m))


@pytest.mark.parametrize("arch", ["mellum", "inkling_text"])
def test_without_an_acceptance_the_draft_is_right_by_chance(arch, tmp_path, monkeypatch):
    """The measurement can fail: the same export without an acceptance (the MTP layers filled
    by the rule alone) is accepted about as often as a random token is right."""
    out = H.export(_config(arch, 1), tmp_path, None)
    m = H.mtp_acceptance(out, 1, monkeypatch)
    print(f"\n{arch} MTP, no acceptance: {float(np.mean(m >= 1)):.3f} over {len(m)} steps")
    assert np.mean(m >= 1) < 0.05


@pytest.mark.parametrize("acceptance", [0.3, 0.6, 0.9])
@pytest.mark.parametrize("target", ["llama", "qwen3_moe"])
def test_assisted_generation_with_an_exported_draft(target, acceptance, tmp_path, monkeypatch):
    cfg = H.config(target, hidden=256, layers=3)
    (tmp_path / "c").mkdir()
    cfg.save_pretrained(tmp_path / "c")
    out, draft = tmp_path / "out", tmp_path / "draft"
    seed = {"llama": "0", "qwen3_moe": "4"}[target]
    args = [str(tmp_path / "c"), str(out), "--acceptance", str(acceptance), "--seed", seed]
    assert export_main(args + ["--quiet", "--draft", str(draft), "--draft-layers", "1"]) == 0
    m = H.assisted_acceptance(out, draft, 3, monkeypatch, tokens=400 if acceptance > 0.8 else 150)
    _report(f"{target} + draft, k=3, A={acceptance}", H.conditional(m, 3), [acceptance] * 3, len(m))


FORWARD = [("qwen3_next", 0.6, 1, {}), ("qwen3_next", 0.6, 2, {}), ("bailing_hybrid", 0.3, 1, {})]
FORWARD += [("bailing_hybrid", 0.6, 1, {}), ("bailing_hybrid", 0.9, 1, {})]
FORWARD += [("bailing_hybrid", 0.6, 2, {})]
FORWARD += [("nemotron_h", a, 1, {}) for a in (0.3, 0.6, 0.9)] + [("nemotron_h", 0.6, 2, {})]
FORWARD += [("qwen3_5_moe_text", a, 1, {}) for a in (0.3, 0.6, 0.9)]
FORWARD += [("qwen3_5_text", 0.6, 1, {}), ("qwen3_5_moe_text", 0.6, 2, {})]
FORWARD += [("glm4_moe_lite", a, 1, {}) for a in (0.3, 0.6, 0.9)]
FORWARD += [("ernie4_5_moe", a, 1, {}) for a in (0.3, 0.6, 0.9)] + [("ernie4_5_moe", 0.6, 2, {})]
FORWARD += [("exaone_moe", a, 1, {}) for a in (0.3, 0.6, 0.9)] + [("exaone_moe", 0.6, 2, {})]
FORWARD += [("hy_v3", a, 1, {}) for a in (0.3, 0.6, 0.9)] + [("hy_v3", 0.6, 2, {})]
FORWARD += [("glm_ocr", a, 1, {}) for a in (0.3, 0.6, 0.9)]
FORWARD += [("exaone4_5", a, 1, {}) for a in (0.3, 0.6, 0.9)]
FORWARD += [("mimo_v2_flash", a, 1, {}) for a in (0.3, 0.6, 0.9)]
FORWARD += [("mimo_v2_flash", 0.6, 2, {})]
FORWARD += [("longcat_flash", a, 1, {}) for a in (0.3, 0.6, 0.9)]
FORWARD += [("longcat_flash", 0.6, 2, {})]
FORWARD += [("bailing_v3", a, 1, {}) for a in (0.3, 0.6, 0.9)] + [("bailing_v3", 0.6, 2, {})]
FORWARD += [("minimax_m3_vl", a, 1, {}) for a in (0.3, 0.6, 0.9)]
FORWARD += [("minimax_m3_vl", 0.6, 2, {})]
# sizes, vocabularies and seeds the design was not developed on
FORWARD += [("bailing_hybrid", 0.75, 3, dict(hidden=256, vocab=6000, layers=4, seed=9))]
FORWARD += [("nemotron_h", 0.7, 3, dict(hidden=192, vocab=5000, layers=6, seed=21))]
FORWARD += [("qwen3_5_moe_text", 0.7, 2, dict(hidden=192, vocab=5000, layers=5, seed=21))]
FORWARD += [("qwen3_5_text", 0.45, 3, dict(hidden=320, vocab=12000, layers=4, seed=8))]
FORWARD += [("glm4_moe_lite", 0.65, 2, dict(hidden=256, vocab=7000, layers=3, seed=17))]
FORWARD += [("ernie4_5_moe", 0.8, 3, dict(hidden=320, vocab=9000, layers=3, seed=23))]
FORWARD += [("exaone_moe", 0.55, 2, dict(hidden=256, vocab=11000, layers=4, seed=29))]
FORWARD += [("hy_v3", 0.85, 2, dict(hidden=192, vocab=7500, layers=3, seed=31))]
FORWARD += [("glm_ocr", 0.55, 3, dict(hidden=192, vocab=9000, layers=3, seed=29))]
FORWARD += [("exaone4_5", 0.8, 2, dict(hidden=256, vocab=5500, layers=3, seed=31))]
FORWARD += [("mimo_v2_flash", 0.7, 3, dict(hidden=320, vocab=6500, layers=3, seed=37))]
FORWARD += [("longcat_flash", 0.7, 3, dict(hidden=320, vocab=8000, layers=3, seed=37))]
FORWARD += [("bailing_v3", 0.65, 3, dict(hidden=192, vocab=7000, layers=4, seed=41))]
FORWARD += [("minimax_m3_vl", 0.75, 2, dict(hidden=256, vocab=6000, layers=3, seed=43))]


@pytest.mark.parametrize("arch,acceptance,k,other", FORWARD)
def test_mtp_by_an_independent_forward(arch, acceptance, k, other, tmp_path):
    from fp8_dummy.realistic.export import export

    other = dict(other)
    seed = other.pop("seed", 0)
    cfg = H.config(arch, mtp=1, **other)
    (tmp_path / "c").mkdir()
    cfg.save_pretrained(tmp_path / "c")
    export(tmp_path / "c", tmp_path / "out", seed=seed, acceptance=acceptance, progress=False,
           allow_unknown=True)  # fmt: skip
    vocab = cfg.get_text_config().vocab_size
    m = independent_mtp_acceptance(tmp_path / "out", arch, k, tmp_path, prompts=4, tokens=120,
                                   vocab=vocab)  # fmt: skip
    _report(f"{arch} MTP (independent forward), k={k}, A={acceptance}", H.conditional(m, k),
            [acceptance] * k, len(m))  # fmt: skip


def test_without_an_acceptance_the_independent_forward_is_right_by_chance(tmp_path):
    """The independent forward can fail: MiMo-V2-Flash's export without an acceptance (its MTP
    layer filled by the rule alone) is accepted about as often as a random token is right."""
    from fp8_dummy.realistic.export import export

    cfg = H.config("mimo_v2_flash", mtp=1)
    (tmp_path / "c").mkdir()
    cfg.save_pretrained(tmp_path / "c")
    export(tmp_path / "c", tmp_path / "out", acceptance=None, progress=False)
    m = independent_mtp_acceptance(tmp_path / "out", "mimo_v2_flash", 1, tmp_path, prompts=4,
                                   tokens=120)  # fmt: skip
    print(f"\nmimo_v2_flash MTP (independent forward), no acceptance: {float(np.mean(m >= 1)):.3f}"
          f" over {len(m)} steps")  # fmt: skip
    assert np.mean(m >= 1) < 0.05


# Sizes, vocabularies, seeds and draft lengths the design was not developed on.
OTHER = [
    ("deepseek_v3", dict(hidden=256, vocab=4096, layers=3), 0.75, 1, 7),
    ("glm4_moe", dict(hidden=512, vocab=8192, layers=2), "0.7,0.45", 2, 11),
    ("deepseek_v3", dict(hidden=192, vocab=32000, layers=2), 0.5, 1, 3),
    ("mellum", dict(hidden=256, vocab=4096, layers=3), 0.8, 1, 5),
    ("inkling_text", dict(hidden=192, vocab=8192, layers=2), "0.8,0.5", 2, 13),
]


@pytest.mark.parametrize("arch,size,acceptance,layers,seed", OTHER)
def test_other_configs(arch, size, acceptance, layers, seed, tmp_path, monkeypatch):
    from fp8_dummy.realistic.export import export

    cfg = _config(arch, layers, **size)
    (tmp_path / "c").mkdir()
    cfg.save_pretrained(tmp_path / "c")
    export(tmp_path / "c", tmp_path / "out", seed=seed, acceptance=acceptance, progress=False)
    m = H.mtp_acceptance(tmp_path / "out", layers, monkeypatch, vocab=size["vocab"])
    want = _wanted(acceptance) if layers > 1 else [float(acceptance)]
    _report(f"{arch} {size} seed {seed} MTP x{layers}, A={acceptance}",
            H.conditional(m, layers), want, len(m))  # fmt: skip


def test_other_draft_length(tmp_path, monkeypatch):
    """A memoryless rate holds at any draft length: k = 5 with a draft of two layers."""
    cfg = H.config("llama", hidden=384, vocab=6000, layers=4, head_dim=96)
    (tmp_path / "c").mkdir()
    cfg.save_pretrained(tmp_path / "c")
    out, draft = tmp_path / "out", tmp_path / "draft"
    args = [str(tmp_path / "c"), str(out), "--acceptance", "0.8", "--seed", "5", "--quiet"]
    assert export_main(args + ["--draft", str(draft)]) == 0
    m = H.assisted_acceptance(out, draft, 5, monkeypatch, tokens=400, vocab=6000)
    _report("llama h384 V6000 + draft, k=5, A=0.8", H.conditional(m, 5), [0.8] * 5, len(m))


@pytest.mark.parametrize("arch", ["deepseek_v3", "glm4_moe", "mellum", "inkling_text"])
def test_sampling_at_temperature_one(arch, tmp_path, monkeypatch):
    """Sampled MTP decoding (rejection sampling): the next-token entropy after random prompts
    within [1 nat, 80% of ln V], and the acceptance, which sampling lowers, reported."""
    cfg = _config(arch, 1)
    out = H.export(cfg, tmp_path, 0.6)
    model = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    h = H.entropies(model, cfg.vocab_size, prompts=32)
    assert h.min() >= 1.0 and h.max() <= 0.8 * math.log(cfg.vocab_size), h
    torch.manual_seed(0)
    m = H.mtp_acceptance(out, 1, monkeypatch, sample=True)
    rate = float(np.mean(m >= 1))
    print(f"\n{arch} sampled, A=0.6: entropy {h.min():.2f}-{h.max():.2f} (mean {h.mean():.2f}) "
          f"nats, acceptance {rate:.3f} over {len(m)} steps")  # fmt: skip
    assert 0.0 < rate < 1.0
