"""Export every causal-LM architecture transformers maps, from its small config (the realistic
sweep's: hidden 64, 2 layers), in bf16: exported and loaded back by transformers with no
missing, unexpected or mismatched key and the in-memory fill's bytes; refused, naming what; or
the config cannot be built small (skipped, as in the realistic sweep).

    .venv/bin/python tests/helpers/export_sweep.py [TYPE ...]
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realistic_sweep as sweep  # noqa: E402

import fp8_dummy  # noqa: E402
from fp8_dummy.realistic import export as E  # noqa: E402

LIMIT = 50_000_000


def one(mt: str) -> str:
    import transformers

    try:
        config = sweep.small_config(mt, 2)
        cls = transformers.AutoModelForCausalLM._model_mapping[type(config)]
    except Exception as e:  # noqa: BLE001 - the sweep's own skips
        return f"skipped (config: {type(e).__name__})"
    from fp8_dummy.realistic import build_model

    try:
        size = sum(t.numel() for t in build_model(config).state_dict().values())
    except Exception as e:  # noqa: BLE001
        return f"skipped (meta build: {type(e).__name__})"
    if size > LIMIT:  # a tower or table the small config keeps large (the realistic sweep's)
        return f"skipped (not small: {size / 1e6:.0f} M parameters)"
    with tempfile.TemporaryDirectory() as d:
        config.save_pretrained(f"{d}/c")
        try:
            E.export(f"{d}/c", f"{d}/o", seed=1, progress=False)
        except Exception as e:  # noqa: BLE001
            return f"refused: {str(e)[:160]}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loaded, info = cls.from_pretrained(f"{d}/o", output_loading_info=True)
                ref = cls._from_config(loaded.config, dtype=torch.bfloat16)
                theirs = loaded.state_dict()
                for n, t in ref.state_dict(keep_vars=True).items():
                    if n in theirs and t.dtype != theirs[n].dtype:
                        t.data = t.data.to(theirs[n].dtype)
                fp8_dummy.initialize_realistic_dummy_weights(ref, seed=1)
        except Exception as e:  # noqa: BLE001
            return f"load failed: {type(e).__name__}: {str(e)[:120]}"
        info["unexpected_keys"] = _not_mtp(config, info.get("unexpected_keys") or [])
        bad = {k: v for k, v in info.items() if v}
        if bad:
            return f"keys: {str(bad)[:160]}"
        ours = ref.state_dict()
        files = _files(f"{d}/o")

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.dtype == b.dtype and torch.equal(
            a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
        )

    # the export's claim (its files hold the in-memory fill's bytes), then transformers' load
    file_differ = [n for n in files if n in ours and not same(ours[n], files[n])]
    if file_differ:
        return f"bytes differ in the files: {file_differ[:3]}"
    differ = [n for n in ours if n in theirs and not same(ours[n], theirs[n])]
    if differ:
        return f"files hold the fill; transformers' load changes: {differ[:3]}"
    return "ok"


def _not_mtp(config, names) -> list[str]:
    """``names`` but the checkpoint's MTP layers (which transformers' class leaves out, its
    ``_keys_to_ignore_on_load_unexpected`` written for the real models' layer index)."""
    from fp8_dummy.realistic.speculative import mtp_prefixes

    mtp = mtp_prefixes(config)
    return [k for k in names if not (mtp and k.startswith(mtp))]


def _files(out: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(Path(out).glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    return tensors


if __name__ == "__main__":
    types = sys.argv[1:] or list(sweep.causal_lm_types())
    for mt in types:
        print(f"{mt}: {one(mt)}", flush=True)
