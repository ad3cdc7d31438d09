"""``export --draft DRAFT --draft-layout eagle3``: the draft in EAGLE-3's layout as vLLM 0.33's
``Eagle3LlamaForCausalLM`` reads it (docs/realistic.md#speculative-decoding). Its config and
tensor names; its greedy proposal after every token, through an independent forward written
from vLLM's class's math (helpers/eagle3_forward.py), equal to the plain draft model's of the
same target (the view's successor) whatever hidden state it is given, at the first draft step
and the next, by vLLM's math and SGLang's (which reads no ``norm_before_residual``);
auxiliary layers both engines capture; a target it cannot serve refused before anything is
written; and (slow tier) the acceptance per position of greedy EAGLE-3 decoding verified
against the exported target's own greedy tokens (transformers' forward), within 0.05 of A by
both engines' math, at the default width and others."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers", reason="transformers is installed by setup_env.sh")

from helpers import speculative as H  # noqa: E402
from helpers.eagle3_forward import Eagle3, eagle3_acceptance  # noqa: E402
from helpers.speculative import one_thread  # noqa: E402, F401 (autouse)

from fp8_dummy.realistic.export import main as export_main  # noqa: E402

NAMES = {"embed_tokens.weight", "fc.weight", "lm_head.weight", "norm.weight"}
NAMES |= {f"midlayer.{n}.weight" for n in ("hidden_norm", "input_layernorm",
                                           "post_attention_layernorm")}  # fmt: skip
NAMES |= {f"midlayer.self_attn.{n}_proj.weight" for n in "qkvo"}
NAMES |= {f"midlayer.mlp.{n}_proj.weight" for n in ("gate", "up", "down")}


def _export(tmp, cfg, acceptance, layout="eagle3", *more):
    """The target and its draft exported; no warning (a failed probe of the target's or the
    draft's twin: the plain rule where the model's facts were meant)."""
    src = tmp / "src"
    if not src.exists():
        cfg.save_pretrained(src)
    target, draft = tmp / f"target-{layout}", tmp / f"draft-{layout}"
    args = [str(src), str(target), "--acceptance", str(acceptance), "--quiet"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert export_main([*args, "--draft", str(draft), "--draft-layout", layout, *more]) == 0
    assert "warning" not in err.getvalue(), err.getvalue()
    return target, draft


def test_the_layout_is_eagle3s(tmp_path):
    cfg = H.config("llama", hidden=128, vocab=1024, layers=5)
    _, draft = _export(tmp_path, cfg, 0.6, "eagle3", "--draft-hidden", "192")
    c = json.loads((draft / "config.json").read_text())
    assert c["architectures"] == ["LlamaForCausalLMEagle3"] and c["num_hidden_layers"] == 1
    assert c["vocab_size"] == c["draft_vocab_size"] == 1024 and c["target_hidden_size"] == 128
    assert c["hidden_size"] == 192 and c["norm_before_residual"] is True
    assert c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 3]
    t = H.read(draft)
    assert set(t) == NAMES
    assert t["fc.weight"].shape == (192, 3 * 128)
    assert t["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * 192
    assert t["midlayer.self_attn.o_proj.weight"].shape == (192, 192)


@pytest.mark.parametrize("target", [64, 128, 256, 448, 4096])
def test_the_default_width_is_not_the_targets_and_its_heads_group(target):
    """SGLang gives a draft of the target's width the target's embedding (no codes): the
    default is the target's plus 64; its KV heads divide its query heads at every width."""
    from fp8_dummy.realistic.speculative.eagle3 import eagle3_config

    c = eagle3_config(H.config("llama", hidden=target, vocab=1024, layers=4))
    assert c["hidden_size"] == target + 64 != c["target_hidden_size"] == target
    for width in range(64, 2049, 32):
        c = eagle3_config(H.config("llama", hidden=target, vocab=1024, layers=4), width)
        heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
        assert heads % kv == 0 and (kv >= 2 or width < 512), (width, heads, kv)


def test_a_plain_drafts_kv_heads_divide_its_heads_at_every_width():
    """The plain draft's grouped query attention (9 heads at width 576, 14 at 448: a quarter
    does not divide them), which transformers' attention and the engines' refuse otherwise."""
    from fp8_dummy.realistic.speculative.draft import draft_config

    for width in range(64, 2049, 64):  # the default widths' step
        c = draft_config(H.config("llama", hidden=256, vocab=1024, layers=4), 2, width)
        heads, kv = c.num_attention_heads, c.num_key_value_heads
        assert heads % kv == 0, (width, heads, kv)


@pytest.mark.parametrize("layers", range(2, 12))
def test_the_auxiliary_layers_are_ones_both_engines_capture(layers):
    """Distinct and ascending (each engine captures a listed layer once, in order, while fc's
    width counts the list), at most L-2 (SGLang's id i is layer i's output), three from four
    layers on, the engines' default (2, L/2, L-3) from seven."""
    from fp8_dummy.realistic.speculative.eagle3 import eagle3_config

    c = eagle3_config(H.config("llama", hidden=128, vocab=1024, layers=layers))
    ids = c["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == sorted(set(ids)) and 0 <= ids[0] and ids[-1] <= layers - 2, ids
    assert len(ids) == min(3, layers - 1)
    if layers >= 7:
        assert ids == [2, layers // 2, layers - 3]


def _proposals(draft, tokens, context, second: bool) -> list[int]:
    """The draft's proposal after each of ``tokens``, appended to ``context`` (random tokens
    with random hidden states of the target's width through fc); ``second``: at the second
    draft step (the hidden state the first step's output)."""
    gen = torch.Generator().manual_seed(1)
    n = len(context)
    aux = torch.randn(n + 1, draft.w["fc.weight"].shape[1], generator=gen) * 3
    hidden = draft.combine([aux])
    out = []
    with torch.no_grad():
        for x in tokens:
            ids = torch.tensor([*context, int(x)])
            pos = torch.arange(n + 1)
            if second:
                _, prev = draft.forward(ids[:-1], hidden[:n], pos[:-1])
                hs = torch.cat([hidden[: n - 1], prev[-1:]])
                logits, _ = draft.forward(torch.cat([ids[: n - 1], ids[-1:]]), hs, pos[:-1] + 1)
            else:
                logits, _ = draft.forward(ids, hidden, pos)
            out.append(int(logits.argmax()))
    return out


@pytest.mark.parametrize("second", [False, True], ids=["first-step", "second-step"])
def test_the_proposal_is_the_views_successor_whatever_the_hidden_state(tmp_path, second):
    cfg = H.config("llama", hidden=128, vocab=1024, layers=4)
    _, eagle = _export(tmp_path, cfg, 0.6)
    _, plain = _export(tmp_path, cfg, 0.6, "llama")
    want = H.draft_proposal(H.read(plain))  # the plain draft's: the view's successor
    draft = Eagle3(eagle)
    rng = np.random.default_rng(2)
    tokens = rng.choice(1024, 120, replace=False)
    context = [int(x) for x in rng.integers(0, 1024, 40)]
    got = _proposals(draft, tokens, context, second)
    assert got == [int(want[x]) for x in tokens]


@pytest.mark.parametrize("second", [False, True], ids=["first-step", "second-step"])
def test_sglangs_math_proposes_the_design_at_every_step(tmp_path, second):
    """SGLang's residual is the raw hidden state: fc's (S and Z rows 0) at the first draft
    step; the previous step's output at the next, whose S holds the previous token's code and
    which the layer subtracts (hidden_norm's W times it, the output's RMS W by the marker)."""
    cfg = H.config("llama", hidden=128, vocab=1024, layers=4)
    _, eagle = _export(tmp_path, cfg, 0.6, "eagle3", "--draft-hidden", "576")
    _, plain = _export(tmp_path, cfg, 0.6, "llama", "--draft-hidden", "576")
    want = H.draft_proposal(H.read(plain))
    rng = np.random.default_rng(2)
    tokens = rng.choice(1024, 60, replace=False)
    context = [int(x) for x in rng.integers(0, 1024, 40)]
    got = _proposals(Eagle3(eagle, engine="sglang"), tokens, context, second)
    assert got == [int(want[x]) for x in tokens]


def test_every_draft_steps_code_is_the_views_in_both_engines_math(tmp_path):
    """Over five draft steps, each on the previous step's output: the output's S is the input
    token's view code, the same by SGLang's math (the raw hidden state as the residual, its
    S subtracted at the marker's RMS W) as by vLLM's (hidden_norm's, cancelled exactly), to a
    part in 100; the output's RMS is W."""
    from fp8_dummy.realistic.speculative.design import layout
    from fp8_dummy.realistic.speculative.eagle3 import WEIGHT

    cfg = H.config("llama", hidden=128, vocab=1024, layers=4)
    _, eagle = _export(tmp_path, cfg, 0.6)
    engines = {e: Eagle3(eagle, engine=e) for e in ("vllm", "sglang")}
    s = layout(engines["vllm"].c["hidden_size"]).s
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 1024, (30,), generator=gen)
    aux = torch.randn(30, engines["vllm"].w["fc.weight"].shape[1], generator=gen) * 3
    with torch.no_grad():
        outs = {}
        for name, d in engines.items():
            hidden, toks, pos, got = d.combine([aux[:25]]), ids[:25], torch.arange(25), []
            for step in range(5):
                _, out = d.forward(toks, hidden, pos)
                got.append(out[-1])
                toks = torch.cat([toks, ids[25 + step : 26 + step]])
                hidden, pos = torch.cat([hidden, out[-1:]]), torch.cat([pos, pos[-1:] + 1])
            outs[name] = torch.stack(got)
    v, g = outs["vllm"][:, list(s)], outs["sglang"][:, list(s)]
    assert ((g - v).norm(dim=1) <= 1e-2 * v.norm(dim=1)).all(), (g - v).norm(dim=1)  # 1e-3 here
    rms = outs["sglang"].pow(2).mean(1).sqrt()
    assert ((rms / WEIGHT - 1).abs() < 1e-2).all(), rms  # 128.02 to 128.15 here


def test_with_the_targets_embedding_the_first_step_proposes_the_targets_successor(tmp_path):
    """SGLang's EAGLE worker gives a draft of the target's width the target's embedding: the
    draft's view (its embedding's S) is not read, and its first step proposes what the target
    makes (the first position accepted at about 1, not A), by either engine's math."""
    cfg = H.config("llama", hidden=128, vocab=1024, layers=4)
    target, eagle = _export(tmp_path, cfg, 0.6, "eagle3", "--draft-hidden", "128")
    t = H.read(target)
    succ = H.weight_maps(t, 128)["successor"]
    rng = np.random.default_rng(2)
    tokens = rng.choice(1024, 60, replace=False)
    context = [int(x) for x in rng.integers(0, 1024, 40)]
    own = _proposals(Eagle3(eagle, engine="sglang"), tokens, context, False)
    assert sum(g == int(succ[x]) for g, x in zip(own, tokens)) < 45  # A = 0.6: 35 here
    draft = Eagle3(eagle, engine="sglang")
    draft.w["embed_tokens.weight"] = torch.from_numpy(t["model.embed_tokens.weight"]).float()
    got = _proposals(draft, tokens, context, False)
    assert got == [int(succ[x]) for x in tokens]


def test_without_the_subtraction_the_second_step_is_wrong(tmp_path):
    """The previous step's code reaches S where the residual is the raw hidden state and the
    layer does not subtract it (v's rows reading the hidden state's S zeroed): the checks above
    can fail."""
    cfg = H.config("llama", hidden=128, vocab=1024, layers=4)
    _, eagle = _export(tmp_path, cfg, 0.6)
    _, plain = _export(tmp_path, cfg, 0.6, "llama")
    want = H.draft_proposal(H.read(plain))
    draft = Eagle3(eagle, engine="sglang")
    width = draft.c["hidden_size"]
    s = range(width - 1 - width // 8, width - 1)  # S (design.layout: d = width/8 here)
    draft.w["midlayer.self_attn.v_proj.weight"][:, [width + c for c in s]] = 0.0
    rng = np.random.default_rng(2)
    tokens = rng.choice(1024, 60, replace=False)
    context = [int(x) for x in rng.integers(0, 1024, 40)]
    assert _proposals(draft, tokens, context, False) == [int(want[x]) for x in tokens]
    got = _proposals(draft, tokens, context, True)
    assert sum(g == int(want[x]) for g, x in zip(got, tokens)) < 50


def test_a_target_eagle3_cannot_serve_is_refused_before_any_write(tmp_path, capsys):
    cfg = H.config("llama", hidden=128, vocab=1024, layers=2)
    cfg.num_hidden_layers = 1
    cfg.save_pretrained(tmp_path / "src")
    args = [str(tmp_path / "src"), str(tmp_path / "t"), "--acceptance", "0.6", "--quiet"]
    assert export_main([*args, "--draft", str(tmp_path / "d"), "--draft-layout", "eagle3"]) == 2
    assert "EAGLE-3 reads hidden states of at least one" in capsys.readouterr().err
    assert not (tmp_path / "t").exists() and not (tmp_path / "d").exists()


# (target config, seed, draft tokens, acceptance): the tiny Llama at each A, then configs the
# design was not developed on (other widths, vocabularies, layers, seeds, a MoE target).
CASES = [(("llama", 256, 1024, 4), 0, 3, a) for a in (0.3, 0.6, 0.9)]
CASES += [(("llama", 384, 6000, 5), 5, 2, 0.75), (("qwen3_moe", 192, 4096, 4), 7, 1, 0.5)]


# SGLang's math (draft width, draft tokens, acceptance): a draft wider than the target keeps its
# own embedding; one of the target's width is given the target's (helpers/eagle3_forward.py)
# (the export's default width, the target's plus 64: 320; then another)
SGLANG = [(None, 3, a) for a in (0.3, 0.6, 0.9)] + [(448, 2, 0.6), (256, 2, 0.6)]


@pytest.mark.slow
@pytest.mark.parametrize("width,k,acceptance", SGLANG)
def test_greedy_eagle3_decoding_by_sglangs_math(width, k, acceptance, tmp_path):
    """Its own embedding: every position at A; the target's embedding: the first position at
    about 1 (the target's own successor)."""
    cfg = H.config("llama", hidden=256, vocab=1024, layers=4)
    more = [] if width is None else ["--draft-hidden", str(width)]
    target, draft = _export(tmp_path, cfg, acceptance, "eagle3", *more)
    m = eagle3_acceptance(target, draft, k, engine="sglang")
    rates = H.conditional(m, k)
    print(f"\nSGLang's math, draft width {width} k={k} A={acceptance}: "
          f"{[round(r, 3) for r in rates]}, {len(m)} steps")  # fmt: skip
    if width == 256:
        assert rates[0] > 0.95, rates
    else:
        assert all(abs(r - acceptance) <= 0.05 for r in rates), rates


@pytest.mark.slow
@pytest.mark.parametrize("arch,seed,k,acceptance", CASES)
def test_greedy_eagle3_decoding_accepts_at_the_rate(arch, seed, k, acceptance, tmp_path):
    name, hidden, vocab, layers = arch
    cfg = H.config(name, hidden=hidden, vocab=vocab, layers=layers)
    target, draft = _export(tmp_path, cfg, acceptance, "eagle3", "--seed", str(seed))
    m = eagle3_acceptance(target, draft, k, vocab=vocab)
    rates = H.conditional(m, k)
    print(f"\n{arch} seed {seed} k={k} A={acceptance}: {[round(r, 3) for r in rates]}, "
          f"{len(m)} steps")  # fmt: skip
    assert all(abs(r - acceptance) <= 0.05 for r in rates), rates


# vLLM's math at widths other than the default (it keeps the draft's own embedding at any)
VLLM = [(256, 3, a) for a in (0.3, 0.6, 0.9)] + [(448, 2, 0.6)]


@pytest.mark.slow
@pytest.mark.parametrize("width,k,acceptance", VLLM)
def test_greedy_eagle3_decoding_at_other_widths_by_vllms_math(width, k, acceptance, tmp_path):
    cfg = H.config("llama", hidden=256, vocab=1024, layers=4)
    target, draft = _export(tmp_path, cfg, acceptance, "eagle3", "--draft-hidden", str(width))
    m = eagle3_acceptance(target, draft, k)
    rates = H.conditional(m, k)
    print(f"\nvLLM's math, draft width {width} k={k} A={acceptance}: "
          f"{[round(r, 3) for r in rates]}, {len(m)} steps")  # fmt: skip
    assert all(abs(r - acceptance) <= 0.05 for r in rates), rates
