"""The SGLang plugin's realistic fill reads the model's config as SGLang handed it to the model's
class, before the class built, without SGLang: SGLang's classes rewrite their config in place
while they build (Nemotron-H's MTP class sets the main layers to one MTP step's, its MLA
attention the rope type to ``deepseek_yarn``), and the fill's values depend on what they
rewrite (the MTP layers on the main layers' count, the model on its rope). Stand-in classes of
any name rewrite their config the same ways, built through the plugin's hook on SGLang's model
construction as SGLang's loaders build; the fill loads the checkpoint of the config as handed:
the user's overrides kept, no file read. A model built without the hook is refused, naming why,
before anything is loaded. SGLang's own classes, loaded equal to the export at TP=1 and 2:
tests/test_engines_sglang_mtp.py and tests/test_engines_sglang_realistic.py."""

from __future__ import annotations

import copy
import json
import types

import pytest
import torch
import transformers as tf
from helpers import speculative as H

from fp8_dummy.engines import sglang as fsglang
from fp8_dummy.realistic import config_checkpoint


class Recorder(torch.nn.Module):
    """A model class that records the checkpoint it is fed (names, bytes); ``rewrite`` is what
    its build does to the config it is handed (in place)."""

    rewrite = staticmethod(lambda config: None)

    def __init__(self, config):
        super().__init__()
        self.rewrite(config)
        self.config, self.names, self.bytes = config, [], {}

    def load_weights(self, weights):
        for name, t in weights:
            self.names.append(name)
            self.bytes[name] = torch.as_tensor(t).clone().view(torch.uint8)


class SomeMTP(Recorder):  # a name the plugin does not know: its main layers set to the step's
    rewrite = staticmethod(lambda c: setattr(c, "layers_block_type", list(c.mtp_layers_block_type)))


class NemotronHForCausalLMMTP(SomeMTP):  # SGLang's name
    pass


class SomeMLA(Recorder):  # SGLang's MLA attention's rewrite of the rope type
    rewrite = staticmethod(
        lambda c: setattr(c, "rope_parameters", dict(c.rope_parameters, rope_type="deepseek_yarn"))
    )


def _initialize_model(model_config, load_config=None, quant_config=None):  # SGLang's, in short
    return model_config.model_class(config=model_config.hf_config)


def build(cls, config, **handed):
    """``cls`` built as SGLang's loaders build, through the plugin's hook; ``handed``: more of
    SGLang's model config (``model_path``, ``is_draft_model``)."""
    handed = types.SimpleNamespace(hf_config=config, model_class=cls, **handed)
    return fsglang._around_build(_initialize_model, handed, None, None)


@pytest.fixture(autouse=True)
def _choices(monkeypatch):
    monkeypatch.delenv("FP8_DUMMY_ACCEPTANCE", raising=False)
    monkeypatch.delenv("FP8_DUMMY_ROUTING", raising=False)


def nemotron(tmp_path, **more):
    cfg = H.config("nemotron_h", hidden=64, vocab=200, head_dim=16, mtp=1, **more)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    return tf.AutoConfig.from_pretrained(tmp_path)  # its _name_or_path: the folder


def layers(model):
    return {int(n.split(".")[2]) for n in model.names if n.startswith("backbone.layers.")}


@pytest.mark.parametrize("cls", [SomeMTP, NemotronHForCausalLMMTP])
def test_the_main_layers_are_the_handed_ones_whatever_the_class(tmp_path, cls):
    config = nemotron(tmp_path)
    model = build(cls, config)
    assert config.num_hidden_layers == 2  # what the class leaves: attention, MoE
    fsglang._fill_realistic(model)
    assert layers(model) == {0, 1, 2, 3}, sorted(layers(model))  # Mamba, MoE, attention, MoE
    assert any(n.startswith("mtp.layers.1.") for n in model.names)
    assert config.layers_block_type == list(config.mtp_layers_block_type)  # left as it was


def test_the_users_overrides_are_kept_over_the_file(tmp_path):
    """SGLang's config is the file with the user's overrides (--json-model-override-args):
    six main layers handed where the folder's config.json says four."""
    config = nemotron(tmp_path)
    config.layers_block_type = [*config.layers_block_type, "linear_attention", "moe"]
    model = build(NemotronHForCausalLMMTP, config)
    fsglang._fill_realistic(model)
    assert layers(model) == set(range(6)), sorted(layers(model))


def test_no_config_file_is_needed(tmp_path):
    """A config SGLang read from elsewhere (a hub id, another file name): the fill reads none."""
    config = nemotron(tmp_path)
    (tmp_path / "config.json").unlink()
    model = build(NemotronHForCausalLMMTP, config)
    fsglang._fill_realistic(model)
    assert layers(model) == {0, 1, 2, 3}


def test_the_rope_type_is_the_handed_one():
    """GLM-4.7-Flash's plain RoPE, which SGLang's MLA attention rewrites to ``deepseek_yarn``
    (a type transformers builds no model of): the checkpoint of the config as handed."""
    config = H.config("glm4_moe_lite", hidden=64, vocab=200, mtp=1)
    handed = copy.deepcopy(config)
    model = build(SomeMLA, config)
    assert config.rope_parameters["rope_type"] == "deepseek_yarn"
    assert fsglang._as_given(model).to_dict() == handed.to_dict()
    fsglang._fill_realistic(model)
    assert model.names == list(dict(config_checkpoint(handed, 0).items()))


def test_the_part_the_model_holds_is_the_handed_part():
    """A class that holds the handed config's text part, or a copy of it it made and rewrote:
    that part as handed."""

    class TextPart(Recorder):
        def __init__(self, config):
            super().__init__(config.text_config)
            config.text_config.vocab_size = 7

    class OwnCopy(Recorder):
        def __init__(self, config):
            super().__init__(copy.deepcopy(config.text_config))
            self.config.vocab_size = 7

    for cls in (TextPart, OwnCopy):
        config = tf.LlavaConfig(text_config=tf.LlamaConfig(vocab_size=300))
        model = build(cls, config)
        given = fsglang._as_given(model)
        assert type(given) is tf.LlamaConfig and given.vocab_size == 300, cls
        assert given is not model.config and model.config.vocab_size == 7


def test_a_model_built_without_the_hook_is_refused_before_loading(tmp_path):
    model = NemotronHForCausalLMMTP(nemotron(tmp_path))
    with pytest.raises(RuntimeError, match="as it was before the class built.*not built through"):
        fsglang._fill_realistic(model)
    assert model.names == []


def test_the_hook_never_stops_the_build(tmp_path):
    """A config that cannot be copied: the model is built, its fill refused; SGLang's own
    errors are SGLang's."""

    class Uncopyable(tf.LlamaConfig):
        def __deepcopy__(self, memo):
            raise TypeError("no copies")

    model = build(Recorder, Uncopyable())
    assert isinstance(model, Recorder)
    with pytest.raises(RuntimeError, match="not built through"):
        fsglang._fill_realistic(model)

    class Refuses(Recorder):
        rewrite = staticmethod(lambda c: (_ for _ in ()).throw(ValueError("SGLang's own")))

    with pytest.raises(ValueError, match="SGLang's own"):
        build(Refuses, tf.LlamaConfig())


class LayersFolded(tf.PretrainedConfig):
    """An engine's own LongCat-Flash config class as SGLang's is: its constructor folds the
    decoder layer count (``num_layers``) into ``num_hidden_layers``, which transformers' config
    derives (two per decoder layer)."""

    model_type = "longcat_flash"

    def __init__(self, num_layers=28, num_hidden_layers=None, **kwargs):
        super().__init__(**kwargs)
        self.num_hidden_layers = num_layers if num_hidden_layers is None else num_hidden_layers


def longcat():
    """(the export's config: transformers' from config.json's fields, its engine-class twin)"""
    config = H.config("longcat_flash", hidden=64, vocab=200, head_dim=16, mtp=1)
    fields = {k: v for k, v in config.to_dict().items() if k != "model_type"}
    return config, LayersFolded(**fields)


def exported(config):
    model = Recorder(config)
    model.load_weights(config_checkpoint(config, 0).items())
    return model


def assert_same(model, export):
    assert model.names == export.names
    assert all(torch.equal(model.bytes[n], export.bytes[n]) for n in export.names)


def test_a_draft_takes_the_main_depth_from_its_target(tmp_path):
    """SGLang's draft settings set LongCat-Flash's ``num_hidden_layers`` to its MTP layer count
    and its config class keeps no other: the draft's fill takes the main model's depth from the
    target built before it in the process, from the same checkpoint (its MTP block's output
    projections are scaled by it), and reads the engine's class as transformers' (the target's
    two decoder layers, not one): both hold the export's bytes."""
    config, target_config = longcat()
    where = dict(model_path=str(tmp_path), revision=None)
    target = build(Recorder, target_config, is_draft_model=False, **where)
    draft_config = copy.deepcopy(target_config)
    draft_config.num_hidden_layers = draft_config.num_nextn_predict_layers  # SGLang's settings
    draft = build(Recorder, draft_config, is_draft_model=True, **where)
    assert draft_config.num_hidden_layers == 1  # the config SGLang hands is left as it was
    export = exported(config)
    for model in (target, draft):
        fsglang._fill_realistic(model)
        assert_same(model, export)


def test_a_draft_of_another_checkpoint_or_alone_keeps_its_own_depth(tmp_path):
    """A draft model of its own (another checkpoint: an EAGLE head of one layer) and a draft
    built where no target was: the config as handed."""
    _, target_config = longcat()
    build(Recorder, target_config, model_path=str(tmp_path / "target"), is_draft_model=False)
    for where in ("other", "alone"):
        draft_config = copy.deepcopy(target_config)
        draft_config.num_hidden_layers = 1
        draft = build(Recorder, draft_config, model_path=str(tmp_path / where), is_draft_model=True)
        assert fsglang._as_given(draft).num_hidden_layers == 1, where


def test_a_draft_takes_the_mtp_layer_count_from_its_target(tmp_path):
    """SGLang's draft settings set ``num_nextn_predict_layers`` to 1 where the draft class
    builds one MTP layer (HY-V3's, Nemotron-H's, Qwen3-Next's): the draft's fill takes the
    count from the target built before it from the same checkpoint (the twin its MTP layers'
    facts are probed on is one of all of them), so both hold the export's bytes, every MTP
    layer's names included; SGLang's loaders read the first."""
    config = H.config("hy_v3", hidden=64, vocab=200, head_dim=16, mtp=2)
    where = dict(model_path=str(tmp_path), revision=None)
    target = build(Recorder, copy.deepcopy(config), is_draft_model=False, **where)
    draft_config = copy.deepcopy(config)
    draft_config.num_nextn_predict_layers = 1  # SGLang's settings
    draft = build(Recorder, draft_config, is_draft_model=True, **where)
    assert draft_config.num_nextn_predict_layers == 1  # the config SGLang hands is left as it was
    export = exported(config)
    assert any(n.startswith("model.layers.3.") for n in export.names)  # the second MTP layer
    for model in (target, draft):
        fsglang._fill_realistic(model)
        assert_same(model, export)
