// The CPU kernels' one way to use several threads: fn(0) .. fn(threads - 1), fn(0) on the
// calling thread and the others on std::threads. Not at::parallel_for: with the OpenMP
// backend that is a header template that runs serially in an extension built without
// -fopenmp, and it would start torch's OpenMP pool (after which a forked child hangs).
// What a thread throws is rethrown here after all are joined; if the system will not start
// a thread, the calling thread runs what is left, so the work is always done.
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
