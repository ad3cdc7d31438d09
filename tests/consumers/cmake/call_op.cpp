// A libtorch program using fp8_dummy's C++ API (fp8_dummy::headers): no link-time
// dependency on fp8_dummy. It checks the clear error before fp8_dummy's library is
// loaded, dlopen()s the library given as argv[1], then compares fp8_dummy::init_ with
// the reference path computed here with ATen (empty_like(float16).uniform_().copy_()),
// byte for byte, and the generator's state afterwards. Exit status 0 when all match.
// Built with CONSUMER_LINKED (link_op), it links fp8_dummy::fp8_dummy instead.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <dlfcn.h>
#include <fp8_dummy/fp8_dummy.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  failures += !ok;
}

at::Tensor bytes(const at::Tensor& t) { return t.contiguous().reshape({-1}).view(at::kByte); }

// The reference path: what fp8_dummy::init_ must reproduce.
void reference(at::Tensor& p, double low, double high, at::Generator gen) {
  if (p.element_size() < 2) {
    at::Tensor t = at::empty_like(p, p.options().dtype(at::kHalf));
    t.uniform_(low, high, gen);
    p.copy_(t);
  } else {
    p.uniform_(low, high, gen);
  }
}

void check_dtype(at::ScalarType dtype, bool transposed) {
  const std::string name = std::string(c10::toString(dtype)) + (transposed ? " (transposed)" : "");
  const auto make = [&] {
    at::Tensor t = at::empty({96, 40}, at::TensorOptions().dtype(dtype));
    return transposed ? t.t() : t;
  };
  at::Tensor ours = make(), expected = make();
  fp8_dummy::init_(ours, -1.0, 1.0, 4321);
  reference(expected, -1.0, 1.0, at::detail::createCPUGenerator(4321));
  expect(at::equal(bytes(ours), bytes(expected)), name + ", seed form: reference bytes");

  at::Generator g1 = at::detail::createCPUGenerator(77);
  at::Generator g2 = at::detail::createCPUGenerator(77);
  fp8_dummy::init_(ours, -0.5, 2.0, std::optional<at::Generator>(g1));
  reference(expected, -0.5, 2.0, g2);
  expect(at::equal(bytes(ours), bytes(expected)), name + ", generator form: reference bytes");
  expect(at::equal(g1.get_state(), g2.get_state()), name + ", generator form: generator state");
}

}  // namespace

int main(int argc, char** argv) {
#ifdef CONSUMER_LINKED
  // Linked with fp8_dummy::fp8_dummy: registered when the program starts.
  (void)argc;
  (void)argv;
  expect(fp8_dummy::is_loaded(), "loaded by linking");
  at::Tensor t = at::empty({8}, at::TensorOptions().dtype(at::kFloat8_e4m3fn));
#else
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FP8_DUMMY_LIBRARY\n", argv[0]);
    return 2;
  }
  // Before the library is loaded: a clear error, and no poisoned cached handle.
  expect(!fp8_dummy::is_loaded(), "not loaded before dlopen");
  at::Tensor t = at::empty({8}, at::TensorOptions().dtype(at::kFloat8_e4m3fn));
  std::string message;
  try {
    fp8_dummy::init_(t, -1.0, 1.0, 1);
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  }
  std::printf("error before loading: %s\n", message.c_str());
  expect(message.find("fp8_dummy's operators are not registered") != std::string::npos &&
             message.find("library_path()") != std::string::npos,
         "clear error before loading");

  // RTLD_LAZY: a wheel's library is a Python extension module whose one Python call
  // (its PyInit function) is never made here.
  if (dlopen(argv[1], RTLD_LAZY | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "dlopen failed: %s\n", dlerror());
    return 1;
  }
  expect(fp8_dummy::is_loaded(), "loaded after dlopen");
#endif

  const std::vector<at::ScalarType> dtypes = {
      at::kFloat8_e4m3fn,  at::kFloat8_e5m2, at::kFloat8_e4m3fnuz, at::kFloat8_e5m2fnuz,
      at::kFloat8_e8m0fnu, at::kHalf,        at::kBFloat16,        at::kFloat};
  for (const auto dtype : dtypes) {
    for (const bool transposed : {false, true}) check_dtype(dtype, transposed);
  }

  // The op's own checks, as c10::Error.
  std::string bad;
  try {
    fp8_dummy::init_(t, 1.0, 0.0, 1);
  } catch (const c10::Error& e) {
    bad = e.what_without_backtrace();
  }
  expect(bad.find("range") != std::string::npos, "low > high rejected: " + bad.substr(0, 60));

  if (failures == 0) {
    std::printf("call_op: all ok\n");
  } else {
    std::printf("call_op: %d FAILED\n", failures);
  }
  return failures == 0 ? 0 : 1;
}
