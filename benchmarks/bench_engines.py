"""The serving engines' own loaders against fp8_dummy's, on their real model classes (vLLM 0.33
and SGLang 0.5.23 on the CPU: the engines lane), per tensor, each row beside the engine's own
load measured in the same run (medians of --repeats after a warm-up; one CPU thread: the
host's work per tensor).

  vllm dummy       a Llama of --layers layers (hidden 64), FP8 with static scales: vLLM's
                   DummyModelLoader.load_weights with its own per-tensor function; with the
                   plugin (``--load-format dummy`` where fp8_dummy is installed: the whole
                   model as one plan); vLLM's own loop calling the plugin's per-tensor
                   function (where a layer is quantized online, or the loop's walk is not
                   proven); and ``--load-format fp8_dummy``; the plugin's row also with a
                   new plan (the kept plans forgotten: an engine's one load per process)
  sglang dummy     the same Llama: SGLang's initialize_dummy_weights, and fp8_dummy's (the
                   plugin's hook; also with a new plan)
  vllm realistic   a Qwen3-MoE of --layers layers and --experts experts (per-expert tensors
  sglang realistic in the checkpoint: tens of thousands), bf16 and FP8 block: the realistic
                   in-engine load (the logical checkpoint through the model's own
                   load_weights) against the same engine loading the export of that config
                   (``python -m fp8_dummy export``) from the page cache (read once, untimed,
                   before); per checkpoint tensor; the realistic load three times: its
                   logical checkpoint kept from an earlier load, and made first (a first
                   load) with the architecture facts' disk cache cold and warm (the run's
                   caches in its own temporary folder)
Each fill is checked first: the plugin's bytes are the engine's own; the realistic load's are
the export's as the engine loads it.

Run with the engines' interpreter and paths, as scripts/ci_engines.sh runs the engine tests:
  PYTHONPATH=build/ci-torch-2.14:$TARGET:$DEPS:tests python benchmarks/bench_engines.py vllm
(``tests`` on the path: the models are built as the engine tests build them,
tests/helpers/vllm_invariant_models.py and sglang_models.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import json_out  # noqa: E402
from measure import run_meta, summarize, time_calls  # noqa: E402

CLOCK = time.perf_counter  # --cpu-time: time.process_time


def timed(fn, repeats: int) -> dict:
    """Median (and spread) of ``repeats`` calls after one warm-up, by :data:`CLOCK`."""
    return summarize(time_calls(lambda _i: fn(), torch.device("cpu"), repeats, clock=CLOCK))


def same(a: dict, b: dict) -> bool:
    keys = sorted(set(a) | set(b))
    view = lambda t: t.data.reshape(t.shape or (1,)).view(torch.uint8)  # noqa: E731
    return all(k in a and k in b and torch.equal(view(a[k]), view(b[k])) for k in keys)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def afresh(fill):
    """``fill`` with the plans kept from earlier fills forgotten first: the plan made again,
    as at an engine's one load per process (the proofs stay the process's)."""
    from fp8_dummy.engines.core.kept import forget

    return lambda: (forget(), fill())


def rows_per_tensor(rows: dict, count: int, base: str) -> dict:
    for r in rows.values():
        r["us_per_tensor"] = r["median_s"] / count * 1e6
        r["x_own"] = r["median_s"] / rows[base]["median_s"]
    return rows


# ---- vLLM ----------------------------------------------------------------------------------


def vllm_dummy(args, tmp: Path) -> dict:
    from helpers import vllm_invariant_models as M
    from vllm.config import set_current_vllm_config
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import dummy_loader, get_model_loader

    from fp8_dummy import vllm as plugin

    M.MODELS["bench"] = dict(M.MODELS["llama"], num_hidden_layers=args.layers)
    model, vllm_config, model_config = M.build("bench", "fp8", tmp / "llama", 1)
    cls = dummy_loader.DummyModelLoader
    own = (dummy_loader.initialize_single_dummy_weight, cls.load_weights)
    plugin.register()  # patches the dummy loader (already imported) and adds the formats
    ours = (dummy_loader.initialize_single_dummy_weight, cls.load_weights)
    loaders = {f: get_model_loader(LoadConfig(load_format=f)) for f in ("dummy", "fp8_dummy")}

    def load(fmt: str, single=ours[0], method=ours[1]):
        def fn():
            dummy_loader.initialize_single_dummy_weight, cls.load_weights = single, method
            try:
                with set_current_vllm_config(vllm_config), torch.no_grad():
                    loaders[fmt].load_weights(model, model_config)
            finally:
                dummy_loader.initialize_single_dummy_weight, cls.load_weights = ours

        return fn

    fills = {
        "vLLM's own (dummy)": load("dummy", *own),
        "dummy with the plugin (one plan)": load("dummy"),
        "dummy with the plugin, a new plan": afresh(load("dummy")),
        "dummy, vLLM's loop, the plugin's function": load("dummy", method=own[1]),
        "--load-format fp8_dummy": load("fp8_dummy"),
    }
    count = len(M.tensors(model))
    result = {"case": "vllm dummy", "model": f"llama fp8, {args.layers} layers", "tensors": count}
    result["one_plan"] = ours[1] is not own[1]  # the plugin replaced the loader's method
    snapshots = {}
    for name, fn in fills.items():
        M.poison(model)
        fn()
        snapshots[name] = {n: t.clone() for n, t in M.tensors(model).items()}
    first = next(iter(snapshots.values()))
    result["identical"] = all(same(first, s) for s in snapshots.values())
    rows = {name: timed(fn, args.repeats) for name, fn in fills.items()}
    result["rows"] = rows_per_tensor(rows, count, "vLLM's own (dummy)")
    return result


def vllm_realistic(args, tmp: Path, quant: str) -> dict:
    from helpers import vllm_invariant_models as M
    from vllm.config import set_current_vllm_config
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader

    from fp8_dummy import vllm as plugin

    M.MODELS["bench"] = dict(M.MODELS["qwen3_moe"], num_hidden_layers=args.layers,
                             num_experts=args.experts, mlp_only_layers=[])  # fmt: skip
    plugin.register()
    ckpt = M.export("bench", quant, tmp / f"moe-{quant}")
    model, vllm_config, model_config = M.build_from(ckpt, 1)
    twin = M.build_from(ckpt, 1)[0]
    realistic = get_model_loader(LoadConfig(load_format="fp8_dummy_realistic"))

    def fill():
        with set_current_vllm_config(vllm_config), torch.no_grad():
            realistic.load_weights(model, model_config)

    def from_disk():
        with set_current_vllm_config(vllm_config):
            M.load_safetensors(twin, model_config)

    checked = lambda: same(M.tensors(model), M.tensors(twin))  # noqa: E731
    return realistic_rows(f"vllm realistic {quant}", args, ckpt, fill, from_disk, checked)


def start_vllm(tmp: Path) -> tuple:
    """vLLM's process groups (one rank, gloo); its two benchmarks."""
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    from helpers import vllm_invariant_models as M

    M.prepare(str(tmp))
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(1, 0, f"tcp://127.0.0.1:{free_port()}", 0, backend="gloo")
        initialize_model_parallel(tensor_model_parallel_size=1)
    return vllm_dummy, vllm_realistic


# ---- SGLang --------------------------------------------------------------------------------


def sglang_dummy(args, tmp: Path) -> dict:
    from helpers import sglang_models as S
    from helpers import vllm_invariant_models as V
    from sglang.srt.model_loader import weight_utils

    from fp8_dummy import sglang as plugin

    config = dict(V.COMMON, **V.MODELS["llama"], num_hidden_layers=args.layers)
    config["quantization_config"] = S.QUANTS["blk"]
    folder = tmp / "sglang-llama"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    model = S.build(folder, 1, 0)
    own = weight_utils.initialize_dummy_weights
    fills = {
        "SGLang's own": lambda: own(model),
        "fp8_dummy (the plugin's hook)": lambda: plugin._around(own, model),
        "fp8_dummy, a new plan": afresh(lambda: plugin._around(own, model)),
    }
    count = len(model.state_dict())
    result = {"case": "sglang dummy", "model": f"llama fp8 block, {args.layers} layers",
              "tensors": count}  # fmt: skip
    snapshots = []
    for fn in fills.values():
        V.poison(model)
        fn()
        snapshots.append({n: t.clone() for n, t in model.state_dict().items()})
    result["identical"] = all(same(snapshots[0], s) for s in snapshots[1:])
    rows = {name: timed(fn, args.repeats) for name, fn in fills.items()}
    result["rows"] = rows_per_tensor(rows, count, "SGLang's own")
    return result


def sglang_realistic(args, tmp: Path, quant: str) -> dict:
    from helpers import sglang_models as S
    from helpers import vllm_invariant_models as V

    from fp8_dummy import sglang as plugin
    from fp8_dummy.realistic.export import export

    config = dict(S.MODELS["qwen3_moe"], num_hidden_layers=args.layers, num_experts=args.experts)
    if S.QUANTS[quant]:
        config["quantization_config"] = S.QUANTS[quant]
    source = tmp / f"sglang-moe-{quant}"
    source.mkdir(parents=True, exist_ok=True)
    (source / "config.json").write_text(json.dumps(config))
    ckpt = tmp / f"sglang-moe-{quant}-ckpt"
    export(source, ckpt, progress=False)
    model, twin = S.build(ckpt, 1, 0), S.build(ckpt, 1, 0)

    def fill():
        with torch.no_grad():
            plugin._fill_realistic(model)

    checked = lambda: same(V.tensors(model), V.tensors(twin))  # noqa: E731
    fields = (f"sglang realistic {quant}", args, ckpt, fill, lambda: S.load_safetensors(twin, ckpt))
    return realistic_rows(*fields, checked)


def start_sglang(tmp: Path) -> tuple:
    """SGLang's runtime context and process groups (one rank, gloo); its two benchmarks."""
    from helpers import sglang_models as S
    from helpers import vllm_invariant_models as V

    S.prepare()
    folder = tmp / "sglang-start"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(V.COMMON, **V.MODELS["llama"])))
    S.start(folder, 1, 0, free_port())
    return sglang_dummy, sglang_realistic


# ---- the checkpoint ------------------------------------------------------------------------


def realistic_rows(case: str, args, ckpt: Path, fill, from_disk, checked) -> dict:
    """The realistic load and the export's, per checkpoint tensor: the export read once into
    the page cache, each load once untimed, the bytes compared (``checked``), then timed; the
    realistic load with its logical checkpoint kept (an engine's later loads of the model) and
    with it made first (a process's first load): with the architecture facts' disk cache cold
    (emptied before each call: a process's first load of a config ever) and warm (a first load
    after it); where the package has no such cache (an older tree), made first once."""
    from fp8_dummy.realistic.kept import forget

    try:
        from fp8_dummy.realistic import facts_cache
    except ImportError:
        facts_cache = None
    count = len(_checkpoint_names(ckpt))
    _read_all(ckpt)
    fill()
    from_disk()
    what = f"qwen3_moe {case.split()[-1]}, {args.layers} layers, {args.experts} experts"
    result = {"case": case, "checkpoint_tensors": count, "model": what, "identical": checked()}
    rows = {"the export from the page cache": timed(from_disk, args.repeats),
            "realistic, in the engine": timed(fill, args.repeats)}  # fmt: skip
    if facts_cache is None:
        first = lambda: (forget(), fill())  # noqa: E731
        rows["realistic, the checkpoint made first"] = timed(first, args.repeats)
    else:

        def cold():
            shutil.rmtree(facts_cache.directory(), ignore_errors=True)
            forget()
            fill()

        rows["realistic, made first, facts cache cold"] = timed(cold, args.repeats)
        rows["realistic, made first, facts cache warm"] = timed(
            lambda: (forget(), fill()), args.repeats
        )
        result["identical"] = result["identical"] and checked()  # the bytes of a warm load
    result["rows"] = rows_per_tensor(rows, count, "the export from the page cache")
    return result


def _checkpoint_names(folder: Path) -> list[str]:
    from safetensors import safe_open

    names = []
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            names += list(h.keys())
    return names


def _read_all(folder: Path) -> None:
    for f in folder.glob("*.safetensors"):
        f.read_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("engine", choices=["vllm", "sglang"])
    parser.add_argument("--cases", default="dummy,realistic", help="dummy, realistic")
    parser.add_argument("--layers", type=int, default=128)
    parser.add_argument("--experts", type=int, default=128, help="realistic: per MoE layer")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the rows in the process's CPU time (user + system, "
                        "time.process_time), not wall time: robust to other work on a "
                        "shared machine")  # fmt: skip
    args = parser.parse_args()
    json_out.check(parser, args.json)
    global CLOCK
    CLOCK = time.process_time if args.cpu_time else time.perf_counter
    args.cases = args.cases.split(",")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fp8_dummy_bench_engines.") as tmp:
        # the on-disk caches (proofs, architecture facts) in the run's own folder: the user's
        # are neither read nor written
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        dummy, realistic = (start_vllm if args.engine == "vllm" else start_sglang)(Path(tmp))
        results = [dummy(args, Path(tmp))] if "dummy" in args.cases else []
        quants = ("bf16", "blk") if "realistic" in args.cases else ()
        results += [realistic(args, Path(tmp), quant) for quant in quants]
    for r in results:
        count = r.get("tensors") or r.get("checkpoint_tensors")
        plan = f", the plugin's dummy as one plan: {r['one_plan']}" if "one_plan" in r else ""
        print(f"\n{r['case']}: {r['model']}: {count} tensors, identical: {r['identical']}{plan}")
        for name, s in r["rows"].items():
            print(f"  {name:<42} {s['median_s'] * 1e3:9.1f} ms {s['us_per_tensor']:8.1f} us/tensor"
                  f" {s['x_own']:6.3f}x")  # fmt: skip
    if args.json:
        json_out.write(args.json, {"meta": run_meta(), "results": results})
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
