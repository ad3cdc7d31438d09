// The test extension's operators (torch.ops.fp8_dummy_test), in one place: what only the
// tests and benchmarks call, kept out of the library users install. Built by
// tests/ext/build.sh from the product's own headers (csrc/cuda_plan/, include/fp8_dummy/, the
// kernels' headers) and linked against the product library, whose functions (argument
// checks, the proof registry, the reference path) the kernels below call, so an emulated
// proof lands in the product's fp8_dummy.self_check_report(). Kernels: emulator/,
// stream_test_ops.cpp, open_table_test_ops.cpp, made_once_test_ops.cpp, philox_roofline.cu.
// Schemas may change at any time.
#include <torch/library.h>

TORCH_LIBRARY(fp8_dummy_test, m) {
  // ---- The CPU stream's pieces (stream_test_ops.cpp, the product's cpu/ headers).
  // Torch's float16 uniform_ transform of the given 32-bit generator outputs (int32
  // tensor, bit patterns), for formula 24 (torch >= 2.12) or 11 (torch <= 2.11), with or
  // without FMA, through the kernels of SIMD level 0 (portable), 1 (AVX2) or 2 (AVX-512;
  // an error where the CPU lacks the level). Returns the float16 values.
  m.def(
      "cpu_transform(Tensor words, float low, float high, int formula, bool fma, int level) "
      "-> Tensor");
  // Advances a CPU generator by `distance` words with the jump-ahead (not by stepping),
  // with the portable or AVX2 polynomial arithmetic (also timed by benchmarks/bench_jump.py).
  m.def("cpu_mt19937_jump(Generator? generator, int distance, bool avx2) -> ()");
  // The next n (tempered) words of a CPU generator's stream, made by the stream on
  // exactly `threads` threads (split and jumps at any size) at SIMD level `level`; the
  // generator advances by n.
  m.def("cpu_mt19937_words(Generator? generator, int n, int threads, int level) -> Tensor");

  // ---- CUDA semantics on the CPU (emulator/), for CPU-only CI and GPU tests.
  // Writes into the CPU tensor `self` the bytes torch's CUDA reference path would write
  // on a GPU with `sm_count` SMs and `max_threads_per_sm` threads per SM, for a
  // generator at (seed, offset); returns the generator offset afterwards. 1-byte (FP8,
  // int8, uint8) and float16 only; saturate_e4m3fn picks what values outside the dtype's
  // range become: saturation, else NaN (float8_e4m3fn above 464) or wrap modulo 256
  // (int8/uint8). contiguous_temp: the temp of init_'s option (row-major order).
  m.def(
      "emulate_cuda_init_(Tensor(a!) self, float low, float high, int seed, int offset, "
      "int sm_count, int max_threads_per_sm, bool saturate_e4m3fn=True, *, "
      "bool contiguous_temp=False) -> int");
  // init_many_ as the CUDA kernel runs it, on CPU tensors: the batched tensors through the
  // kernel's own work table, lookup and per-item code, simulated block by block on a
  // GPU of `sm_count` SMs (`grid` blocks; 0: the kernel's own choice), the others
  // through emulate_cuda_init_ (offset 0). Checks that every work item is visited once.
  // Returns the number of batched launches.
  m.def(
      "emulate_cuda_init_many_(Tensor(a!)[] tensors, float low, float high, int seed, "
      "int sm_count, int max_threads_per_sm, bool saturate_e4m3fn=True, int grid=0, *, "
      "bool contiguous_temp=False) -> int");
  // Our per-tensor CUDA kernel on the CPU (1-byte dtypes): every work item through the kernel's
  // own WorkWalk and per-item code, on a simulated grid of `grid` blocks (0: the launcher's
  // wave at the blocks per SM the kernel's launch bounds ask for, cuda_kernel_grid); returns
  // the generator offset afterwards, as emulate_cuda_init_.
  m.def(
      "emulate_cuda_kernel_init_(Tensor(a!) self, float low, float high, int seed, int offset, "
      "int sm_count, int max_threads_per_sm, bool saturate_e4m3fn=True, int grid=0, *, "
      "bool contiguous_temp=False) -> int");
  // The CUDA launchers' proofs with emulated kernels (cuda_plan/cuda_proof.h): init_ and
  // init_many_ as the launchers run them on a GPU of these properties, the kernels used
  // where their key is proven, the reference emulation else (the report shows the keys).
  // split_probe: the key and probe of a call over 2^30 elements (two pieces), at any size.
  m.def(
      "emulate_proven_cuda_init_(Tensor(a!) self, float low, float high, int seed, int offset, "
      "int sm_count, int max_threads_per_sm, bool saturate_e4m3fn, bool generator_form, *, "
      "bool contiguous_temp=False, bool split_probe=False) -> int");
  m.def(
      "emulate_proven_cuda_init_many_(Tensor(a!)[] tensors, float low, float high, int seed, "
      "int sm_count, int max_threads_per_sm, bool saturate_e4m3fn=True, *, "
      "bool contiguous_temp=False) -> int");
  // init_stateless_ as its CUDA launcher runs it, emulated: the kernel's per-element rule
  // (fp8_dummy/cuda/stateless.h) where its key is proven against the CPU kernel, else the CPU.
  m.def(
      "emulate_proven_cuda_init_stateless_(Tensor(a!) self, float low, float high, int seed, "
      "int key_offset=0, int element_offset=0, int[]? element_strides=None, int sm_count=132) "
      "-> ()");
  // Elements of the CUDA init_ probe of a call of `numel` elements on a GPU of these
  // properties (cuda_plan/cuda_proof.h: at most 7 device bytes each).
  m.def("cuda_probe_numel(int sm_count, int max_threads_per_sm, int numel=1) -> int");
  // Per reference launch of `numel` elements, the blocks of emulate_cuda_kernel_init_'s default
  // grid for the linear or the strided kernel: the launcher's one resident wave at the blocks
  // per SM the kernel's __launch_bounds__ ask for (cuda_plan/cuda_work_item.h).
  m.def("cuda_kernel_grid(int numel, int sm_count, int max_threads_per_sm, bool linear) -> int[]");
  // The batched kernel's work table for tensors of these sizes (allocates nothing): [tiles,
  // then per piece: tensor, start, count, threads, steps, offset, first tile].
  m.def("cuda_batch_table(int[] numels, int sm_count, int max_threads_per_sm) -> int[]");
  // The batched kernel's division of a work item by its piece's group count, by multiply and
  // shift (cuda_plan/cuda_batch_table.h): numerators[i] / divisors[i] for each i.
  m.def("cuda_batch_divide(int[] numerators, int[] divisors) -> int[]");
  // The reference's CUDA launches for n float16 elements: [offset after, then per
  // launch: start, count, threads, steps, offset used]. Allocates nothing, so the
  // split of more than 2^30 elements can be tested anywhere.
  m.def("cuda_launch_plan(int numel, int sm_count, int max_threads_per_sm, int offset) -> int[]");
  // Our float16 -> 1-byte conversion of all 65536 float16 bit patterns (uint8 tensor); for
  // int8/uint8, saturate_e4m3fn false means wrap modulo 256.
  m.def("fp8_convert_table(ScalarType dtype, bool saturate_e4m3fn) -> Tensor");
  // The logic of the CUDA kernel's one-time probe, given torch's copy_ of all float16
  // bit patterns (`table`): [mode (0 saturate, 1 NaN on overflow, 2 wrap modulo 256, -1 none),
  // whether `hw_table` (our hardware conversion's bytes) may stand in for it (0/1)].
  m.def("pick_fp8_mode(Tensor table, ScalarType dtype, Tensor? hw_table=None) -> int[]");
  // Philox4x32-10 of one counter under one key (known-answer tests).
  m.def("philox4x32_10(int[] counter, int[] key) -> int[]");

  // ---- The host path's hash table (open_table_test_ops.cpp, csrc/common/open_table.h).
  // A table of (word, number) made with room for `reserve` keys, then each key inserted with
  // the number of keys before it: [whether the reserve found memory (0/1), per key its slot's
  // number, whether it went in now (0/1) and the table's capacity after it, then per key the
  // number the finished table finds (-1: none)].
  m.def("open_table(int[] keys, int reserve) -> int[]");

  // ---- Objects made once, a failure not kept (made_once_test_ops.cpp, csrc/common/made_once.h).
  // Four slots made by a maker whose calls numbered in `failing` fail, made_once called until it
  // makes them: per call [made (0/1), the maker's calls so far], then per slot the number of
  // the call that made it (-1: none).
  m.def("made_once(int[] failing) -> int[]");

  // ---- CUDA only (philox_roofline.cu), for benchmarks/bench_cuda.py: the Philox work of init_ on
  // `numel` elements with no stores but one folded word per thread into `out` (int32, at
  // least as many elements as the launch has threads; the number needed is returned by a
  // call with out empty).
  m.def("philox_roofline(Tensor(a!) out, int numel, int seed) -> int");
}
