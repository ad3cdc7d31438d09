"""The header-only C++ API, used like another extension would: a consumer built with
torch.utils.cpp_extension.load against fp8_dummy.get_include() only (no link to
fp8_dummy), whose own operators call fp8_dummy::init_, init_many_, init_stateless_ and
random_ from C++. Slow (one compile of the consumer, ~30 s)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from conftest import FP8_DTYPES, WIDE_DTYPES, as_bytes, poison, storage_bytes
from helpers.build_util import run, tool_env

import fp8_dummy
from fp8_dummy import reference

pytestmark = pytest.mark.slow

CONSUMER_CPP = r"""
// Another extension's operators, calling fp8_dummy through its C++ API.
#include <fp8_dummy/fp8_dummy.h>
#include <torch/library.h>

namespace {

void fill(at::Tensor& t, int64_t seed) { fp8_dummy::init_(t, -1.0, 1.0, seed); }

void fill_generator(at::Tensor& t, double low, double high, std::optional<at::Generator> g) {
  fp8_dummy::init_(t, low, high, std::move(g));
}

void fill_many(at::TensorList ts, int64_t seed) { fp8_dummy::init_many_(ts, -1.0, 1.0, seed); }

void fill_stateless(at::Tensor& t, int64_t seed, int64_t element_offset) {
  fp8_dummy::init_stateless_(t, -1.0, 1.0, seed, /*key_offset=*/3, element_offset);
}

void fill_bytes(at::Tensor& t, int64_t seed, std::optional<at::Generator> g) {
  if (g.has_value()) {
    fp8_dummy::random_(t, -128, 128, std::move(g));
  } else {
    fp8_dummy::random_(t, -128, 128, seed);
  }
}

bool loaded() { return fp8_dummy::is_loaded(); }

}  // namespace

TORCH_LIBRARY(fp8_dummy_consumer, m) {
  m.def("fill(Tensor(a!) t, int seed) -> ()");
  m.def("fill_generator(Tensor(a!) t, float low, float high, Generator? g) -> ()");
  m.def("fill_many(Tensor(a!)[] ts, int seed) -> ()");
  m.def("fill_stateless(Tensor(a!) t, int seed, int element_offset) -> ()");
  m.def("fill_bytes(Tensor(a!) t, int seed, Generator? g) -> ()");
  m.def("loaded() -> bool", &loaded);
}

TORCH_LIBRARY_IMPL(fp8_dummy_consumer, CPU, m) {
  m.impl("fill", TORCH_FN(fill));
  m.impl("fill_generator", TORCH_FN(fill_generator));
  m.impl("fill_many", TORCH_FN(fill_many));
  m.impl("fill_stateless", TORCH_FN(fill_stateless));
  m.impl("fill_bytes", TORCH_FN(fill_bytes));
}
"""

# In a process that has not loaded fp8_dummy: the consumer's call fails with a clear
# message, then works once the library is loaded by path (no `import fp8_dummy`).
BEFORE_LOADING = r"""
import sys
import torch
consumer, library = sys.argv[1:]
torch.ops.load_library(consumer)
assert not torch.ops.fp8_dummy_consumer.loaded()
t = torch.empty(64, dtype=torch.float8_e5m2)
try:
    torch.ops.fp8_dummy_consumer.fill(t, 5)
except RuntimeError as e:
    message = str(e)
else:
    raise AssertionError("no error before loading fp8_dummy")
print(message.splitlines()[0])
assert "fp8_dummy's operators are not registered" in message, message
assert "library_path()" in message, message
torch.ops.load_library(library)
assert "fp8_dummy" not in sys.modules
assert torch.ops.fp8_dummy_consumer.loaded()
torch.ops.fp8_dummy_consumer.fill(t, 5)
g = torch.Generator().manual_seed(5)
expected = torch.empty(64, dtype=torch.float16).uniform_(-1.0, 1.0, generator=g).to(t.dtype)
assert torch.equal(t.view(torch.uint8), expected.view(torch.uint8))
print("loaded by path: ok")
"""


@pytest.fixture(scope="module")
def consumer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Builds and loads the consumer; returns its library."""
    from torch.utils import cpp_extension

    build = tmp_path_factory.mktemp("cpp_consumer")
    source = build / "consumer.cpp"
    source.write_text(CONSUMER_CPP)
    env = tool_env()  # ninja from this venv, MAX_JOBS
    with pytest.MonkeyPatch.context() as mp:
        for key in ("PATH", "MAX_JOBS"):
            mp.setenv(key, env[key])
        cpp_extension.load(
            name="fp8_dummy_consumer",
            sources=[str(source)],
            extra_include_paths=[fp8_dummy.get_include()],
            build_directory=str(build),
            is_python_module=False,
            verbose=False,
        )
    (library,) = build.glob("fp8_dummy_consumer*.so")
    return library


@pytest.mark.parametrize("dtype", FP8_DTYPES + WIDE_DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "gaps"])
def test_consumer_seed_form(consumer: Path, dtype: torch.dtype, layout: str) -> None:
    def make() -> torch.Tensor:
        base = poison(torch.empty(48, 130, dtype=dtype))
        return {"contiguous": base, "transposed": base.t(), "gaps": base[:, ::3]}[layout]

    via_cpp, via_python, expected = make(), make(), make()
    torch.ops.fp8_dummy_consumer.fill(via_cpp, 2024)
    fp8_dummy.init_(via_python, -1.0, 1.0, 2024)
    reference.new_path(expected, -1.0, 1.0, 2024)
    assert torch.equal(storage_bytes(via_cpp), storage_bytes(via_python))
    assert torch.equal(as_bytes(via_cpp), as_bytes(expected))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16], ids=str)
def test_consumer_generator_form(consumer: Path, dtype: torch.dtype) -> None:
    g_cpp, g_ref = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    via_cpp, expected = torch.empty(1000, dtype=dtype), torch.empty(1000, dtype=dtype)
    for _ in range(2):  # the generator advances as the reference advances it
        torch.ops.fp8_dummy_consumer.fill_generator(via_cpp, -0.5, 3.0, g_cpp)
        reference.new_path(expected, -0.5, 3.0, generator=g_ref)
        assert torch.equal(as_bytes(via_cpp), as_bytes(expected))
    assert torch.equal(g_cpp.get_state(), g_ref.get_state())


def test_consumer_init_many_and_stateless(consumer: Path) -> None:
    dtypes = [torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16]
    via_cpp = [poison(torch.empty(37 * (i + 1), dtype=dt)) for i, dt in enumerate(dtypes)]
    expected = [poison(torch.empty_like(t)) for t in via_cpp]
    torch.ops.fp8_dummy_consumer.fill_many(via_cpp, 77)
    for t in expected:
        reference.new_path(t, -1.0, 1.0, 77)
    for a, b in zip(via_cpp, expected):
        assert torch.equal(storage_bytes(a), storage_bytes(b))
    shard, whole = (
        torch.empty(5, 16, dtype=torch.float8_e5m2),
        torch.empty(8, 16, dtype=torch.float8_e5m2),
    )
    torch.ops.fp8_dummy_consumer.fill_stateless(shard, 9, 3 * 16)
    fp8_dummy.init_stateless_(whole, -1.0, 1.0, 9, key_offset=3)
    assert torch.equal(as_bytes(shard), as_bytes(whole[3:]))


def test_consumer_random_bytes(consumer: Path) -> None:
    via_cpp, expected = torch.empty(5000, dtype=torch.int8), torch.empty(5000, dtype=torch.int8)
    torch.ops.fp8_dummy_consumer.fill_bytes(via_cpp, 31, None)
    expected.random_(-128, 128, generator=torch.Generator().manual_seed(31))
    assert torch.equal(via_cpp, expected)
    g_cpp, g_ref = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
    torch.ops.fp8_dummy_consumer.fill_bytes(via_cpp, 0, g_cpp)
    expected.random_(-128, 128, generator=g_ref)
    assert torch.equal(via_cpp, expected)
    assert torch.equal(g_cpp.get_state(), g_ref.get_state())


def test_consumer_errors_are_the_ops(consumer: Path) -> None:
    with pytest.raises(RuntimeError, match=r"\[from, to\) range"):
        torch.ops.fp8_dummy_consumer.fill_generator(
            torch.empty(4, dtype=torch.float8_e4m3fn), 1.0, 0.0, None
        )


def test_consumer_before_loading(consumer: Path, tmp_path: Path) -> None:
    proc = run(
        [sys.executable, "-I", "-c", BEFORE_LOADING, consumer, fp8_dummy.library_path()],
        cwd=tmp_path,
    )
    print(proc.stdout)
    assert "loaded by path: ok" in proc.stdout
