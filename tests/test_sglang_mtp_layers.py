"""The SGLang plugin's realistic fill of SGLang's Nemotron-H MTP class, without SGLang: that class
sets its config's main layers to one MTP step's (attention, MoE) in place while it builds, and
the MTP layers' values depend on the main layers (the residual scale of the model's L layers).
A stand-in of the class's name, holding a config rewritten the same way: the fill loads the
checkpoint of the config.json in the model's folder (its main layers all there), and refuses,
naming why, before anything is loaded where that folder has no config.json. The class itself,
loaded equal to the export at TP=1 and 2: tests/test_engines_sglang_mtp.py."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from helpers import speculative as H

from fp8_dummy.engines import sglang as fsglang


class NemotronHForCausalLMMTP(torch.nn.Module):  # SGLang's name; records what it is fed
    def __init__(self, config):
        super().__init__()
        self.config, self.names = config, []

    def load_weights(self, weights):
        self.names += [name for name, _ in weights]


def _rewritten(folder):
    """The config SGLang's class holds: read from ``folder``, its main layers the MTP step's."""
    config = tf.AutoConfig.from_pretrained(folder)
    config.layers_block_type = list(config.mtp_layers_block_type)
    return config


@pytest.fixture
def folder(tmp_path):
    cfg = H.config("nemotron_h", hidden=64, vocab=200, head_dim=16, mtp=1)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    return tmp_path


def test_the_main_layers_are_the_files(folder, monkeypatch):
    monkeypatch.delenv("FP8_DUMMY_ACCEPTANCE", raising=False)
    monkeypatch.delenv("FP8_DUMMY_ROUTING", raising=False)
    config = _rewritten(folder)
    assert config.num_hidden_layers == 2  # what the class leaves: attention, MoE
    model = NemotronHForCausalLMMTP(config)
    fsglang._fill_realistic(model)
    layers = {int(n.split(".")[2]) for n in model.names if n.startswith("backbone.layers.")}
    assert layers == {0, 1, 2, 3}, sorted(layers)  # the file's four: Mamba, MoE, attention, MoE
    assert any(n.startswith("mtp.layers.1.") for n in model.names)
    assert config.layers_block_type == list(config.mtp_layers_block_type)  # left as it was


def test_a_folder_without_config_json_is_refused_before_loading(folder):
    config = _rewritten(folder)
    (folder / "config.json").unlink()
    model = NemotronHForCausalLMMTP(config)
    with pytest.raises(ValueError, match="rewrote the main layers.*no config.json"):
        fsglang._fill_realistic(model)
    assert model.names == []
