// The one hash table of the host path's sets and maps keyed by pointers and words (the walk's
// modules met, the kinds' keys seen, the storages of a list): a few thousand to a few hundred
// thousand keys met once per tensor or module, where a node-based container's allocation per key
// would be most of the pass's time.
//
// One array of slots, a power of two long (at least 16), probed linearly from the top bits of
// the key's word times the golden ratio (Fibonacci hashing: the top bits depend on every bit of
// the word, and the low bits of aligned pointers are alike). It is kept at most half full, so a
// probe always meets a vacant slot and ends; it doubles when a new key would fill more than half.
// Nothing is ever removed: no tombstones. Torch-free and exception-free (includable from .cu):
// where memory is short, `reserve` and `insert` say so and leave the table as it was, and each
// user decides what that means (an error, or the slower path it has).
//
// Traits: `Slot` (trivially copyable; `Slot{}` is vacant), `Key` (with ==), and
//   static Key key(const Slot&);      the key a slot holds
//   static bool vacant(const Slot&);  whether a slot holds no key
//   static uint64_t word(const Key&); the key in one word (the table multiplies it)
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace fp8_dummy {

template <class Traits>
class OpenTable {
 public:
  using Slot = typename Traits::Slot;
  using Key = typename Traits::Key;
  // Slots are copied when the table grows, and freed without a destructor.
  static_assert(std::is_trivially_copyable_v<Slot>);

  // Room for `keys` keys without growing; false where memory is short (the table is unchanged).
  bool reserve(size_t keys) noexcept {
    if (keys > (SIZE_MAX >> 2)) return false;  // 2 * keys slots: more than memory holds
    int bits = kMinBits;
    while ((size_t{1} << bits) < 2 * keys) ++bits;
    return bits <= bits_ || rehash(bits);
  }

  // The slot that holds `key`, or nullptr.
  const Slot* find(const Key& key) const noexcept {
    if (slots_ == nullptr) return nullptr;
    for (size_t at = start(key);; at = next(at)) {
      const Slot& s = slots_[at];
      if (Traits::vacant(s)) return nullptr;
      if (Traits::key(s) == key) return &s;
    }
  }

  // `slot` put where its key is not in the table: {where it went, true}; else {the slot that
  // holds the key, false}; {nullptr, false} where the table had to grow and memory was short
  // (the table is then unchanged).
  std::pair<const Slot*, bool> insert(const Slot& slot) noexcept {
    const Key key = Traits::key(slot);
    size_t at = 0;
    if (slots_ != nullptr) {
      for (at = start(key); !Traits::vacant(slots_[at]); at = next(at)) {
        if (Traits::key(slots_[at]) == key) return {&slots_[at], false};
      }
    }
    if (2 * (used_ + 1) > capacity()) {
      if (!rehash(slots_ == nullptr ? kMinBits : bits_ + 1)) return {nullptr, false};
      at = free_slot(key);
    }
    slots_[at] = slot;
    ++used_;
    return {&slots_[at], true};
  }

  size_t size() const noexcept { return used_; }
  size_t capacity() const noexcept { return slots_ == nullptr ? 0 : size_t{1} << bits_; }

 private:
  static constexpr int kMinBits = 4;

  size_t start(const Key& key) const noexcept {
    return static_cast<size_t>((Traits::word(key) * 0x9E3779B97F4A7C15ull) >> (64 - bits_));
  }
  size_t next(size_t at) const noexcept { return (at + 1) & ((size_t{1} << bits_) - 1); }
  size_t free_slot(const Key& key) const noexcept {
    size_t at = start(key);
    while (!Traits::vacant(slots_[at])) at = next(at);
    return at;
  }
  // Every key moved into a table of 2^bits vacant slots. The slots' memory comes from the
  // non-throwing operator new (an array new-expression throws for a length beyond its limit).
  bool rehash(int bits) noexcept {
    if ((PTRDIFF_MAX >> bits) < static_cast<ptrdiff_t>(sizeof(Slot))) return false;  // too long
    const size_t n = size_t{1} << bits;
    Slots made(static_cast<Slot*>(::operator new(n * sizeof(Slot), std::nothrow)));
    if (made == nullptr) return false;
    std::uninitialized_value_construct_n(made.get(), n);
    Slots old = std::exchange(slots_, std::move(made));
    const size_t old_capacity = old == nullptr ? 0 : size_t{1} << bits_;
    bits_ = bits;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (!Traits::vacant(old[i])) slots_[free_slot(Traits::key(old[i]))] = old[i];
    }
    return true;
  }

  struct Free {
    void operator()(Slot* p) const noexcept { ::operator delete(p); }
  };
  using Slots = std::unique_ptr<Slot[], Free>;

  Slots slots_;
  int bits_ = 0;
  size_t used_ = 0;
};

// Traits of a set of words or pointers, the key itself in a slot: zero (null) marks a free slot,
// so a user whose key can be zero keeps that one aside.
template <class T>
struct NonzeroSet {
  using Slot = T;
  using Key = T;
  static Key key(const Slot& s) { return s; }
  static bool vacant(const Slot& s) { return s == T{}; }
  static uint64_t word(const Key& k) {
    if constexpr (std::is_pointer_v<T>) {
      return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(k));
    } else {
      return static_cast<uint64_t>(k);
    }
  }
};

}  // namespace fp8_dummy
