// The CPU kernels' one way to use several threads: std::threads (at::parallel_for runs
// serially in an extension built without -fopenmp, and starting torch's OpenMP pool would
// hang a forked child); errors rethrown; the caller runs what the system will not start.
#pragma once

#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace fp8_dummy {
namespace cpu {

template <typename Fn>
void run_on_threads(int threads, const Fn& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto run = [&](int t) {
    try {
      fn(t);
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads > 1 ? threads - 1 : 0));
  int started = 1;
  for (; started < threads; ++started) {
    try {
      pool.emplace_back(run, started);
    } catch (const std::system_error&) {
      break;  // the system would not start more: this thread runs the rest
    }
  }
  run(0);
  for (int t = started; t < threads; ++t) run(t);
  for (auto& th : pool) th.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace cpu
}  // namespace fp8_dummy
