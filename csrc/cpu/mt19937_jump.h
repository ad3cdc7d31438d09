// Jump-ahead for torch's at::mt19937: the engine state k words further on, for any k < 2^64,
// in well under a millisecond, with exactly the fields (state_, left_, next_) that k calls
// of the engine would leave. This is what lets each thread of mt19937_stream.h start at its
// own range of the stream instead of stepping through everything before it.
//
// The maths (Haramoto, Matsumoto, Nishimura, Panneton, L'Ecuyer 2008). Number the words
// x[0..] with x[0..623] a block and x[n + 624] = x[n + 397] ^ twist(x[n], x[n + 1]). The
// window W_n = (x[n], ..., x[n + 623]) steps linearly: W_{n+1} = A W_n. Once the block has
// been twisted at least once, W lies in the subspace where phi(A) = 0 (phi: mt19937_phi.h),
// so A^d W = g(A) W with g = x^d mod phi (gf2_poly.h). A block fresh from seeding or from
// set_state need not lie there (31 bits of x[0] are dead: A's minimal polynomial is
// x * phi), hence one ordinary twist first; without it some distances come out wrong.
//
// g(A) W by Horner's rule, with the generator's own word step as "multiply by A", on a
// circular window. With q-bit windows (T[u] = u(A) W for all u < 2^q, q = 6: 156 KB) the
// 19937 word steps stay, but the window additions drop from ~10^4 to ~3300 + 64.
#pragma once

#include <ATen/core/MT19937RNGEngine.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/gf2_poly.h"
#include "cpu/mt19937_simd.h"

namespace fp8_dummy {
namespace cpu {

constexpr int kJumpWindowBits = 6;  // the prototype's measured optimum (4..8 within 20%)

namespace detail {

// Word j of the window is buf[(head + j) % 624].
struct Window {
  alignas(64) uint32_t buf[kMtN];
  int head = 0;

  // W <- A W: word head becomes the window's next word, and the head moves on.
  void step() {
    const int h = head;
    const int h1 = h + 1 == kMtN ? 0 : h + 1;
    const int hm = h + kMtM >= kMtN ? h + kMtM - kMtN : h + kMtM;
    buf[h] = mt_twist_word(buf[hm], buf[h], buf[h1]);
    head = h1;
  }
  // W <- W + src (src in window order): two contiguous runs, so the loops vectorize.
  __attribute__((always_inline)) void add(const uint32_t* __restrict src) {
    const int h = head;
    uint32_t* __restrict a = buf + h;
    for (int j = 0; j < kMtN - h; ++j) a[j] ^= src[j];
    const uint32_t* __restrict s2 = src + (kMtN - h);
    for (int j = 0; j < h; ++j) buf[j] ^= s2[j];
  }
  void store(uint32_t* out) const {
    std::memcpy(out, buf + head, sizeof(uint32_t) * (kMtN - head));
    std::memcpy(out + (kMtN - head), buf, sizeof(uint32_t) * head);
  }
};

// Bits [pos, pos + q) of g, zeros above its top.
inline uint32_t poly_bits(const Poly& g, int pos, int q) {
  const int w = pos >> 6;
  const int sh = pos & 63;
  uint64_t v = g[w] >> sh;
  if (sh && w + 1 < kPolyWords) v |= g[w + 1] << (64 - sh);
  return static_cast<uint32_t>(v & ((uint64_t{1} << q) - 1));
}

// s <- g(A) s. Inlined into a portable and an AVX2 caller, so the same loops are
// vectorized for each (the window additions are most of the time).
__attribute__((always_inline)) inline void apply_poly_body(const Poly& g, uint32_t* s) {
  constexpr int q = kJumpWindowBits;
  const int d = poly_degree(g);
  if (d < 0) {  // cannot happen for x^k mod phi; kept for completeness
    std::memset(s, 0, sizeof(uint32_t) * kMtN);
    return;
  }
  // ext = x[n .. n + 624 + q - 2]: A^t s is ext[t .. t + 623] for t < q.
  uint32_t ext[kMtN + q];
  std::memcpy(ext, s, sizeof(uint32_t) * kMtN);
  for (int m = 0; m + 1 < q; ++m) ext[kMtN + m] = mt_twist_word(ext[m + kMtM], ext[m], ext[m + 1]);
  constexpr int kTable = 1 << q;
  std::vector<uint32_t> table(static_cast<size_t>(kTable) * kMtN);
  uint32_t* T = table.data();
  for (int u = 1; u < kTable; ++u) {  // T[u] = T[u without its top bit] + A^top s
    const int top = 31 - __builtin_clz(static_cast<uint32_t>(u));
    const uint32_t* __restrict lo = T + static_cast<size_t>(u ^ (1 << top)) * kMtN;
    const uint32_t* __restrict e = ext + top;
    uint32_t* __restrict t = T + static_cast<size_t>(u) * kMtN;
    for (int j = 0; j < kMtN; ++j) t[j] = lo[j] ^ e[j];
  }
  const int top_chunk = d / q;
  Window acc;
  std::memcpy(acc.buf, T + static_cast<size_t>(poly_bits(g, top_chunk * q, q)) * kMtN,
              sizeof(acc.buf));
  for (int w = top_chunk - 1; w >= 0; --w) {
    for (int i = 0; i < q; ++i) acc.step();
    const uint32_t c = poly_bits(g, w * q, q);
    if (c) acc.add(T + static_cast<size_t>(c) * kMtN);
  }
  acc.store(s);
}

inline void apply_poly_portable(const Poly& g, uint32_t* s) { apply_poly_body(g, s); }

#ifdef FP8_DUMMY_X86
__attribute__((target("avx2"))) inline void apply_poly_avx2(const Poly& g, uint32_t* s) {
  apply_poly_body(g, s);
}
#endif

}  // namespace detail

// Advances `pod` (stream_usable, mt19937_stream.h) by k words: afterwards it is the state k
// calls of at::mt19937 would leave, bit for bit (left_ and next_ included). `avx2`: the CPU
// runs AVX2 (the polynomial arithmetic and window additions then use it).
inline void mt_jump(at::mt19937_data_pod& pod, uint64_t k, bool avx2) {
  // The current block still holds left_ - 1 words, from next_ on; a call with left_ == 1
  // twists first (so does a freshly seeded engine, whose next_ then does not matter).
  const uint64_t head = static_cast<uint64_t>(pod.left_ - 1);
  if (k <= head) {
    pod.next_ += static_cast<uint32_t>(k);
    pod.left_ -= static_cast<int>(k);
    return;
  }
  const uint64_t rest = k - head;                 // >= 1 words from blocks not yet made
  const uint64_t blocks = (rest - 1) / kMtN + 1;  // twists needed; no overflow
  const int used = static_cast<int>(rest - (blocks - 1) * kMtN);  // of the last, in [1, 624]
  uint32_t next_block[kMtN];
  mt_twist_scalar(pod.state_.data(), next_block);  // into the phi subspace (see above)
  if (blocks >= 2) {
    const Poly g = x_pow_mod(uint64_t{kMtN} * (blocks - 1), avx2);  // <= k: no overflow
#ifdef FP8_DUMMY_X86
    if (avx2) {
      detail::apply_poly_avx2(g, next_block);
    } else {
      detail::apply_poly_portable(g, next_block);
    }
#else
    detail::apply_poly_portable(g, next_block);
#endif
  }
  std::memcpy(pod.state_.data(), next_block, sizeof(next_block));
  pod.next_ = static_cast<uint32_t>(used);
  pod.left_ = kMtN + 1 - used;
}

}  // namespace cpu
}  // namespace fp8_dummy
