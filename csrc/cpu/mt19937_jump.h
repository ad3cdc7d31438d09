// Jump-ahead for at::mt19937: the state k words on (any k < 2^64), fields and all, in under
// a millisecond (Haramoto et al. 2008): once twisted, a block lies where phi(A) = 0 (phi:
// mt19937_phi.h), so A^d W = g(A) W with g = x^d mod phi over GF(2), applied by Horner's rule
// with the word step as "multiply by A" and 6-bit windows (T[u] = u(A) W: 156 KB).
#pragma once

#include <ATen/core/MT19937RNGEngine.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/mt19937.h"
#include "cpu/mt19937_phi.h"

namespace fp8_dummy {
namespace cpu {

// ---- Polynomials over GF(2) modulo phi, just enough for x^k mod phi. phi = x^19937 + psi,
// deg psi = 19314 (a gap of 623 bits), 134 terms: a reduction folds 9-word chunks (576 < 623
// bits) into 134 places below. Powering: squarings (a bit spread) and multiplications by x.

constexpr int kPolyWords = (kPhiDegree + 63) / 64;  // 312: any residue, and phi's top word
constexpr int kPhiWord = kPhiDegree / 64;           // 311: the word holding x^19937
constexpr int kPhiBit = kPhiDegree % 64;            // 33

using Poly = std::array<uint64_t, kPolyWords>;  // bit i: the coefficient of x^i

inline int poly_degree(const Poly& p) {  // -1 for the zero polynomial
  for (int w = kPolyWords - 1; w >= 0; --w) {
    if (p[w]) return 64 * w + 63 - __builtin_clzll(p[w]);
  }
  return -1;
}

namespace detail {

// psi's terms, and where a word above the leading one folds to (31 + t bits up).
struct PsiTerms {
  int n = 0;
  int t[kPhiNumTerms];
  int off[kPhiNumTerms];  // (31 + t) / 64
  int sh[kPhiNumTerms];   // (31 + t) % 64
  PsiTerms() {
    for (int i = 0; i < kPhiNumTerms && kPhiTerms[i] < kPhiDegree; ++i, ++n) {
      t[n] = kPhiTerms[i];
      off[n] = (64 * (kPhiWord + 1) - kPhiDegree + t[n]) / 64;
      sh[n] = (64 * (kPhiWord + 1) - kPhiDegree + t[n]) % 64;
    }
  }
};

inline const PsiTerms& psi() {
  static const PsiTerms p;
  return p;
}

// Bit i of a byte moved to bit 2i: squaring is this spread, then a reduction.
inline uint64_t spread32(uint32_t w) {
  static const auto table = [] {
    std::array<uint16_t, 256> v{};
    for (int b = 0; b < 256; ++b) {
      for (int i = 0; i < 8; ++i) v[b] |= static_cast<uint16_t>(((b >> i) & 1) << (2 * i));
    }
    return v;
  }();
  return uint64_t{table[w & 255]} | uint64_t{table[(w >> 8) & 255]} << 16 |
         uint64_t{table[(w >> 16) & 255]} << 32 | uint64_t{table[w >> 24]} << 48;
}

// XORs the 9-word chunk at e[4 .. 13) (zeros around it), shifted left by sh[k] bits, at word
// base + off[k] of r, for every term k.
inline void fold_chunk_portable(uint64_t* r, int base, const uint64_t* e) {
  const PsiTerms& p = psi();
  for (int k = 0; k < p.n; ++k) {
    uint64_t* d = r + base + p.off[k];
    const int sh = p.sh[k];
    for (int j = 0; j < 10; ++j) d[j] ^= (e[4 + j] << sh) | ((e[3 + j] >> 1) >> (63 - sh));
  }
}

#ifdef FP8_DUMMY_X86
// Folds at aligned words (misaligned overlapping stores defeat store forwarding: ~25% slower).
__attribute__((target("avx2"))) inline void fold_chunk_avx2(uint64_t* r, int base,
                                                            const uint64_t* e) {
  const PsiTerms& p = psi();
  for (int k = 0; k < p.n; ++k) {
    const int w = base + p.off[k];
    const int m = w & 3;
    auto* d = reinterpret_cast<__m256i*>(r + (w - m));
    const __m128i sl = _mm_cvtsi32_si128(p.sh[k]);
    const __m128i sr = _mm_cvtsi32_si128(64 - p.sh[k]);  // a shift by 64 gives 0
    const uint64_t* src = e + 4 - m;
    for (int j = 0; j < 4; ++j) {
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * j));
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * j - 1));
      const __m256i v = _mm256_or_si256(_mm256_sll_epi64(hi, sl), _mm256_srl_epi64(lo, sr));
      _mm256_store_si256(d + j, _mm256_xor_si256(_mm256_load_si256(d + j), v));
    }
  }
}
#endif

// r[0 .. 2 * kPolyWords) mod phi into out; r (32-byte aligned, one zero word of slack at
// the end) is clobbered.
inline void reduce_mod_phi(uint64_t* r, Poly& out, bool avx2) {
  constexpr int kChunk = 9;
  auto* fold = &fold_chunk_portable;
#ifdef FP8_DUMMY_X86
  if (avx2) fold = &fold_chunk_avx2;
#endif
  for (int hi = 2 * kPolyWords; hi > kPhiWord + 1;) {
    const int lo = hi - kChunk > kPhiWord + 1 ? hi - kChunk : kPhiWord + 1;
    alignas(32) uint64_t e[24] = {};
    uint64_t any = 0;
    for (int j = 0; j < hi - lo; ++j) {
      e[4 + j] = r[lo + j];
      any |= e[4 + j];
      r[lo + j] = 0;
    }
    if (any) fold(r, lo - (kPhiWord + 1), e);
    hi = lo;
  }
  // The leading word's bits from x^19937 up: each folds onto psi's terms.
  const PsiTerms& p = psi();
  const uint64_t w = r[kPhiWord] >> kPhiBit;
  r[kPhiWord] &= (uint64_t{1} << kPhiBit) - 1;
  for (int k = 0; w && k < p.n; ++k) {
    r[p.t[k] >> 6] ^= w << (p.t[k] & 63);
    r[(p.t[k] >> 6) + 1] ^= (w >> 1) >> (63 - (p.t[k] & 63));  // w >> (64 - sh), also sh = 0
  }
  std::memcpy(out.data(), r, sizeof(Poly));
}

inline void sqr_mod(const Poly& a, Poly& out, bool avx2) {  // out may be a
  alignas(32) uint64_t r[2 * kPolyWords + 4] = {};
  for (int i = 0; i < kPolyWords; ++i) {
    r[2 * i] = spread32(static_cast<uint32_t>(a[i]));
    r[2 * i + 1] = spread32(static_cast<uint32_t>(a[i] >> 32));
  }
  reduce_mod_phi(r, out, avx2);
}

inline void mul_x_mod(Poly& a) {
  for (int i = kPolyWords - 1; i > 0; --i) a[i] = (a[i] << 1) | (a[i - 1] >> 63);
  a[0] <<= 1;
  if ((a[kPhiWord] >> kPhiBit) & 1) {  // x^19937 = psi
    a[kPhiWord] ^= uint64_t{1} << kPhiBit;
    const PsiTerms& p = psi();
    for (int k = 0; k < p.n; ++k) a[p.t[k] >> 6] ^= uint64_t{1} << (p.t[k] & 63);
  }
}

}  // namespace detail

// x^k mod phi, left to right; the leading 14 bits of k are a monomial below 2^14 < 19937.
inline Poly x_pow_mod(uint64_t k, bool avx2) {
  Poly r{};
  const int nbits = k ? 64 - __builtin_clzll(k) : 0;
  const int lead = nbits < 14 ? nbits : 14;
  const uint64_t e0 = lead ? k >> (nbits - lead) : 0;
  r[e0 >> 6] = uint64_t{1} << (e0 & 63);
  for (int b = nbits - lead - 1; b >= 0; --b) {
    detail::sqr_mod(r, r, avx2);
    if ((k >> b) & 1) detail::mul_x_mod(r);
  }
  return r;
}

// ---- g(A) applied to a block.

constexpr int kJumpWindowBits = 6;  // the prototype's measured optimum (4..8 within 20%)

namespace detail {

struct Window {  // word j is buf[(head + j) % 624]
  alignas(64) uint32_t buf[kMtN];
  int head = 0;

  void step() {  // W <- A W
    const int h = head;
    const int h1 = h + 1 == kMtN ? 0 : h + 1;
    const int hm = h + kMtM >= kMtN ? h + kMtM - kMtN : h + kMtM;
    buf[h] = mt_twist_word(buf[hm], buf[h], buf[h1]);
    head = h1;
  }
  // W <- W + src (window order): two contiguous runs, so the loops vectorize.
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

inline uint32_t poly_bits(const Poly& g, int pos, int q) {  // bits [pos, pos + q)
  const int w = pos >> 6;
  const int sh = pos & 63;
  uint64_t v = g[w] >> sh;
  if (sh && w + 1 < kPolyWords) v |= g[w + 1] << (64 - sh);
  return static_cast<uint32_t>(v & ((uint64_t{1} << q) - 1));
}

// s <- g(A) s (g != 0), inlined into a portable and an AVX2 caller.
__attribute__((always_inline)) inline void apply_poly_body(const Poly& g, uint32_t* s) {
  constexpr int q = kJumpWindowBits;
  // ext = x[n .. n + 624 + q - 2]: A^t s is ext[t .. t + 623] for t < q.
  uint32_t ext[kMtN + q];
  std::memcpy(ext, s, sizeof(uint32_t) * kMtN);
  for (int m = 0; m + 1 < q; ++m) ext[kMtN + m] = mt_twist_word(ext[m + kMtM], ext[m], ext[m + 1]);
  std::vector<uint32_t> table(static_cast<size_t>(1 << q) * kMtN);
  uint32_t* T = table.data();
  for (int u = 1; u < (1 << q); ++u) {  // T[u] = T[u without its top bit] + A^top s
    const int top = 31 - __builtin_clz(static_cast<uint32_t>(u));
    const uint32_t* __restrict lo = T + static_cast<size_t>(u ^ (1 << top)) * kMtN;
    const uint32_t* __restrict e = ext + top;
    uint32_t* __restrict t = T + static_cast<size_t>(u) * kMtN;
    for (int j = 0; j < kMtN; ++j) t[j] = lo[j] ^ e[j];
  }
  const int top_chunk = poly_degree(g) / q;
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

// `pod` (stream_usable) k words on, bit for bit as k calls leave it (left_ and next_
// included). `avx2`: the CPU runs AVX2.
inline void mt_jump(at::mt19937_data_pod& pod, uint64_t k, bool avx2) {
  const uint64_t head = static_cast<uint64_t>(pod.left_ - 1);  // words left in the block
  if (k <= head) {
    pod.next_ += static_cast<uint32_t>(k);
    pod.left_ -= static_cast<int>(k);
    return;
  }
  const uint64_t rest = k - head;                 // >= 1 words from blocks not yet made
  const uint64_t blocks = (rest - 1) / kMtN + 1;  // twists needed
  const int used = static_cast<int>(rest - (blocks - 1) * kMtN);  // of the last, in [1, 624]
  uint32_t next_block[kMtN];
  mt_twist_scalar(pod.state_.data(), next_block);  // into the phi subspace
  if (blocks >= 2) {
    const Poly g = x_pow_mod(uint64_t{kMtN} * (blocks - 1), avx2);
    auto* apply = &detail::apply_poly_portable;
#ifdef FP8_DUMMY_X86
    if (avx2) apply = &detail::apply_poly_avx2;
#endif
    apply(g, next_block);
  }
  std::memcpy(pod.state_.data(), next_block, sizeof(next_block));
  pod.next_ = static_cast<uint32_t>(used);
  pod.left_ = kMtN + 1 - used;
}

}  // namespace cpu
}  // namespace fp8_dummy
