// Polynomials over F2 modulo phi (mt19937_phi.h), just enough to compute the jump
// polynomial x^k mod phi for any k < 2^64 (mt19937_jump.h).
//
// Why no tables and no general multiply: phi = x^19937 + psi with deg psi = 19314, a gap of
// 623 bits, and psi has only 134 terms. So reducing a product is one top-down pass: a chunk
// of 9 words (576 bits < 623) above the degree is XORed, shifted, into 134 places that all
// lie below the chunk itself. Squaring over F2 is linear (a(x)^2 = a(x^2): spread the bits),
// so left-to-right powering needs only squarings and multiplications by x: about
// bits(k) - 14 squarings of ~20 us each. (A table of x^(2^j) would need full products,
// ~4x dearer than a squaring, and 160 KB of data; measured slower.)
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "cpu/mt19937_phi.h"
#include "cpu/mt19937_simd.h"  // FP8_DUMMY_X86

namespace fp8_dummy {
namespace cpu {

constexpr int kPolyWords = (kPhiDegree + 63) / 64;  // 312: any residue, and phi's top word
constexpr int kPhiWord = kPhiDegree / 64;           // 311: the word holding x^19937
constexpr int kPhiBit = kPhiDegree % 64;            // 33

// A residue mod phi, bit i = coefficient of x^i; bits from 19937 on are zero.
using Poly = std::array<uint64_t, kPolyWords>;

inline bool poly_bit(const Poly& p, int i) { return (p[i >> 6] >> (i & 63)) & 1; }

inline int poly_degree(const Poly& p) {  // -1 for the zero polynomial
  for (int w = kPolyWords - 1; w >= 0; --w) {
    if (p[w]) return 64 * w + 63 - __builtin_clzll(p[w]);
  }
  return -1;
}

namespace detail {

// psi's terms (phi's without x^19937), with where a word above the leading one folds to:
// word 312 + i holds x^(19937 + 31 + 64 i + b), so it lands at bit 31 + t + 64 i + b.
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

// spread8[b]: bit i of b moved to bit 2i (squaring is this spread, then a reduction).
struct Spread8 {
  uint16_t v[256];
  Spread8() {
    for (int b = 0; b < 256; ++b) {
      uint16_t s = 0;
      for (int i = 0; i < 8; ++i) s |= static_cast<uint16_t>(((b >> i) & 1) << (2 * i));
      v[b] = s;
    }
  }
};

inline const Spread8& spread8() {
  static const Spread8 s;
  return s;
}

inline uint64_t spread32(uint32_t w, const uint16_t* s) {
  return uint64_t{s[w & 255]} | uint64_t{s[(w >> 8) & 255]} << 16 |
         uint64_t{s[(w >> 16) & 255]} << 32 | uint64_t{s[w >> 24]} << 48;
}

// XORs a 9-word chunk, shifted left by sh[k] bits, at word base + off[k] of r, for every
// term k. The chunk sits at e[4 .. 13) of a buffer that is zero elsewhere (so the words
// around it shift in zeros).
inline void fold_chunk_portable(uint64_t* r, int base, const uint64_t* e) {
  const PsiTerms& p = psi();
  for (int k = 0; k < p.n; ++k) {
    uint64_t* d = r + base + p.off[k];
    const int sh = p.sh[k];
    for (int j = 0; j < 10; ++j) d[j] ^= (e[4 + j] << sh) | ((e[3 + j] >> 1) >> (63 - sh));
  }
}

#ifdef FP8_DUMMY_X86
// The same with 4 words per vector. Each fold starts at an aligned word (the misalignment
// is taken from where e is read): consecutive terms overlap, and overlapping unaligned
// read-modify-writes defeat store forwarding (the prototype measured ~25% slower).
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

}  // namespace detail

// Reduces r[0 .. 2 * kPolyWords) (degree < 2 * 19937) mod phi into out. r is clobbered; it
// must be 32-byte aligned (the AVX2 folds store aligned) with one zero word of slack at the
// end. `avx2`: the CPU runs AVX2 (checked by the caller).
inline void reduce_mod_phi(uint64_t* r, Poly& out, bool avx2) {
  constexpr int kChunk = 9;
  (void)avx2;
  for (int hi = 2 * kPolyWords; hi > kPhiWord + 1;) {
    const int lo = hi - kChunk > kPhiWord + 1 ? hi - kChunk : kPhiWord + 1;
    alignas(32) uint64_t e[24] = {};
    uint64_t any = 0;
    for (int j = 0; j < hi - lo; ++j) {
      e[4 + j] = r[lo + j];
      any |= e[4 + j];
      r[lo + j] = 0;
    }
    if (any) {
#ifdef FP8_DUMMY_X86
      if (avx2) {
        detail::fold_chunk_avx2(r, lo - (kPhiWord + 1), e);
      } else {
        detail::fold_chunk_portable(r, lo - (kPhiWord + 1), e);
      }
#else
      detail::fold_chunk_portable(r, lo - (kPhiWord + 1), e);
#endif
    }
    hi = lo;
  }
  // The leading word's 31 bits from x^19937 up: each folds onto psi's terms.
  const detail::PsiTerms& p = detail::psi();
  const uint64_t w = r[kPhiWord] >> kPhiBit;
  r[kPhiWord] &= (uint64_t{1} << kPhiBit) - 1;
  if (w) {
    for (int k = 0; k < p.n; ++k) {
      const int word = p.t[k] >> 6;
      const int sh = p.t[k] & 63;
      r[word] ^= w << sh;
      r[word + 1] ^= (w >> 1) >> (63 - sh);  // w >> (64 - sh), also for sh = 0
    }
  }
  std::memcpy(out.data(), r, sizeof(Poly));
}

// out = a^2 mod phi (out may be a).
inline void sqr_mod(const Poly& a, Poly& out, bool avx2) {
  alignas(32) uint64_t r[2 * kPolyWords + 4];
  const uint16_t* s = detail::spread8().v;
  for (int i = 0; i < kPolyWords; ++i) {
    r[2 * i] = detail::spread32(static_cast<uint32_t>(a[i]), s);
    r[2 * i + 1] = detail::spread32(static_cast<uint32_t>(a[i] >> 32), s);
  }
  for (int i = 2 * kPolyWords; i < 2 * kPolyWords + 4; ++i) r[i] = 0;
  reduce_mod_phi(r, out, avx2);
}

// a = a * x mod phi.
inline void mul_x_mod(Poly& a) {
  for (int i = kPolyWords - 1; i > 0; --i) a[i] = (a[i] << 1) | (a[i - 1] >> 63);
  a[0] <<= 1;
  if ((a[kPhiWord] >> kPhiBit) & 1) {  // x^19937 = psi
    a[kPhiWord] ^= uint64_t{1} << kPhiBit;
    const detail::PsiTerms& p = detail::psi();
    for (int k = 0; k < p.n; ++k) a[p.t[k] >> 6] ^= uint64_t{1} << (p.t[k] & 63);
  }
}

// x^k mod phi. Left-to-right binary powering; the leading 14 bits of k are a monomial
// below 2^14 < 19937, which needs no reduction.
inline Poly x_pow_mod(uint64_t k, bool avx2) {
  Poly r{};
  const int nbits = k ? 64 - __builtin_clzll(k) : 0;
  const int lead = nbits < 14 ? nbits : 14;
  const uint64_t e0 = lead ? k >> (nbits - lead) : 0;
  r[e0 >> 6] = uint64_t{1} << (e0 & 63);
  for (int b = nbits - lead - 1; b >= 0; --b) {
    sqr_mod(r, r, avx2);
    if ((k >> b) & 1) mul_x_mod(r);
  }
  return r;
}

}  // namespace cpu
}  // namespace fp8_dummy
