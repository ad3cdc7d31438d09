"""The host path's one hash table (csrc/common/open_table.h): on keys chosen to collide in its
slots (test extension), and through each of its users with many keys, repeats and pointers
alike in their low bits: the kinds' keys seen (fp8_dummy._C._kinds), the walk's modules met
(fp8_dummy._C._walk_shape), the storages of tensor_kinds' last word and of fill_order. Each
against the rule in plain Python."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from ext import test_ops

from fp8_dummy import tensors as walks
from fp8_dummy.engines import core

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = 0x9E3779B97F4A7C15
INVERSE = pow(GOLDEN, -1, 2**64)  # a key k with k * GOLDEN = j (mod 2^64): INVERSE * j


def signed(word: int) -> int:
    return word - 2**64 if word >= 2**63 else word


def table_rule(keys: list[int], reserve: int, reserved: bool) -> list[int]:
    """What the table answers, by its rule: numbers in order of first appearance; at least 16
    slots, a power of two with room for `reserve` keys at most half full; doubled when a new
    key would fill more than half (never for a key met before)."""
    capacity = 0
    if reserved:
        capacity = 16
        while capacity < 2 * reserve:
            capacity *= 2
    numbers: dict[int, int] = {}
    out = [int(reserved)]
    for k in keys:
        added = k not in numbers
        if added:
            if 2 * (len(numbers) + 1) > capacity:
                capacity = 16 if capacity == 0 else 2 * capacity
            numbers[k] = len(numbers)
        out += [numbers[k], int(added), capacity]
    return out + [numbers[k] for k in keys]


def colliding_keys(rng: random.Random, n: int) -> list[int]:
    """Keys whose hash starts at the first slot (k * GOLDEN small) or the last (near 2^64: the
    probe wraps around), keys alike in their low 20 bits, zero, all with repeats."""
    pool = [0]
    pool += [INVERSE * j % 2**64 for j in range(1, n)]
    pool += [INVERSE * (2**64 - j) % 2**64 for j in range(1, n)]
    pool += [rng.getrandbits(44) << 20 | 0x5A5A5 for _ in range(n)]
    keys = [rng.choice(pool) for _ in range(rng.randint(1, 4 * n))]
    return [signed(k) for k in keys]


@pytest.mark.parametrize("seed", range(12))
def test_the_table_numbers_every_key_and_grows_by_its_rule(seed):
    rng = random.Random(seed)
    keys = colliding_keys(rng, rng.choice([5, 40, 300, 2000]))
    reserve = rng.choice([0, 1, 7, 8, 9, rng.randint(0, 3000)])
    assert test_ops.open_table(keys, reserve) == table_rule(keys, reserve, True)


def test_a_reserve_beyond_memory_says_so_and_the_table_still_works():
    keys = colliding_keys(random.Random(1), 100)
    # 2^58 slots of 16 bytes: the allocator has none; 2^63: more bytes than an object may
    # have; 2^62 keys: twice as many slots, more than a size_t counts
    for reserve in (2**57, 2**62 - 1, 2**62):
        assert test_ops.open_table(keys, reserve) == table_rule(keys, reserve, False)


PROGRAM = r"""
#include <cstdio>
#include "common/open_table.h"
struct Numbered {
  struct Slot {
    uint64_t word = 0;
    long long number = -1;
  };
  using Key = uint64_t;
  static Key key(const Slot& s) { return s.word; }
  static bool vacant(const Slot& s) { return s.number < 0; }
  static uint64_t word(const Key& k) { return k; }
};
int main() {
  fp8_dummy::OpenTable<Numbered> table;
  std::printf("%d", table.reserve(%RESERVE%) ? 1 : 0);
  const unsigned long long keys[] = {%KEYS%};
  for (const unsigned long long k : keys) {
    const auto [slot, added] = table.insert({k, static_cast<long long>(table.size())});
    std::printf(" %lld %d %zu", slot->number, added ? 1 : 0, table.capacity());
  }
  for (const unsigned long long k : keys) std::printf(" %lld", table.find(k)->number);
  std::printf("\n");
}
"""


@pytest.mark.slow  # compiles a program with g++
def test_the_table_compiles_and_works_without_torch(tmp_path):
    """The header is torch-free (the CUDA sources may include it): g++ alone, -Werror."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    keys = [k % 2**64 for k in colliding_keys(random.Random(5), 30)]
    src, exe = tmp_path / "table.cpp", tmp_path / "table"
    text = PROGRAM.replace("%RESERVE%", "3").replace("%KEYS%", ", ".join(f"{k}ull" for k in keys))
    src.write_text(text)
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Werror"]
    subprocess.run([cxx, *flags, f"-I{ROOT / 'csrc'}", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert [int(x) for x in out.split()] == table_rule(keys, 3, True)


# ---- the kinds' keys seen ------------------------------------------------------------------


def kinds_rule(locals_: list, ts: list, facts: list, attr: str | None) -> tuple[list, list]:
    index: dict = {}
    kind_of, firsts = [], []
    for i, (local, t, f) in enumerate(zip(locals_, ts, facts)):
        key = (local, type(t), f) + ((getattr(t, attr, None),) if attr else ())
        if key not in index:
            index[key] = len(index)
            firsts.append(i)
        kind_of.append(index[key])
    return kind_of, firsts


class Sub(torch.Tensor):
    pass


def fresh(s: str) -> str:
    """An equal string that is another object (the table misses it, the dict does not)."""
    return "".join(list(s))


@pytest.mark.parametrize("seed", range(8))
def test_the_kinds_keys_are_the_dicts(seed):
    """Many keys, met again; odd seeds: most keys alike but for the attribute (the table must
    tell apart keys that share three of their four items)."""
    c_kinds = core.kinds._C_KINDS
    if c_kinds is None:
        pytest.skip("the library has no _kinds (no Python API in the process)")
    rng = random.Random(seed)
    n = rng.randint(2000, 6000)
    alike = seed % 2 == 1
    names = [f"w{i}" for i in range(rng.randint(1, 3 if alike else n))]
    pool = []
    for i in range(rng.randint(500, 2000) if alike else rng.randint(1, 60)):
        t = rng.choice([torch.empty(1), torch.nn.Parameter(torch.empty(1)),
                        torch.empty(1).as_subclass(Sub)])  # fmt: skip
        pick = 4 if alike and rng.random() < 0.9 else rng.randint(0, 3)
        if pick == 1:
            t.tag = rng.randint(0, 3)
        elif pick == 2:
            t.tag = int(str(2**40 + rng.randint(0, 3)))  # equal values, other objects
        elif pick == 3:
            t.tag = fresh(rng.choice(["a", "b"]))
        elif pick == 4:
            t.tag = i  # a value of its own
        pool.append(t)
    locals_, ts, facts = [], [], []
    for _ in range(n):
        name = rng.choice(names)
        locals_.append(fresh(name) if rng.random() < 0.1 else name)
        ts.append(rng.choice(pool))
        big = int(str(2**40 + rng.randint(0, 2)))  # equal values, other objects
        facts.append(0 if alike else rng.randint(0, 4) if rng.random() < 0.8 else big)
    for attr in (None, "tag"):
        kind_of, firsts, attrs = c_kinds(locals_, False, ts, facts, attr)
        assert (kind_of, firsts) == kinds_rule(locals_, ts, facts, attr)
        if attr:
            assert [id(a) for a in attrs] == [id(getattr(t, attr, None)) for t in ts]


# ---- the walk's modules met ----------------------------------------------------------------


def shared_modules(rng: random.Random, n: int) -> torch.nn.Module:
    """n modules, each a child of an earlier one and some of several (no cycle): more than the
    walk's table starts with room for."""
    ms = [torch.nn.Module() for _ in range(n)]
    for j, m in enumerate(ms):
        m.register_parameter("w", torch.nn.Parameter(torch.empty(1)))
        if j:
            ms[rng.randrange(j)].add_module(f"c{j}", m)
        for k in range(rng.choice([0, 0, 0, 1, 2])):
            if j + 1 < n:
                m.add_module(f"s{k}", ms[rng.randrange(j + 1, n)])  # met again elsewhere
    return ms[0]


@pytest.mark.parametrize("seed", range(3))
def test_the_walk_meets_each_module_once(seed):
    rng = random.Random(seed)
    model = shared_modules(rng, rng.randint(600, 3000))
    ours = walks._C_WALK(model, walks._OWN_ORDER, walks._NAMED_MODULES, "")
    theirs = walks.walk_shape_python(model)
    assert ours not in (None, False)
    assert ours[0] == theirs[0]
    assert len(ours[1]) == len(theirs[1]) and all(a is b for a, b in zip(ours[1], theirs[1]))
    assert len(ours[1]) == len(list(model.modules()))  # one parameter each, each module once


# ---- the storages ----------------------------------------------------------------------------


def storage_tensors(rng: random.Random) -> list[torch.Tensor]:
    """Storages whose data pointers are alike in their low bits (at a stride of a power of two
    in one buffer), some taken twice: the same storage again, a view of it, another storage at
    the same address, empty tensors (no data pointer)."""
    stride = 2 ** rng.randint(6, 14)
    n = rng.randint(1, 3000)
    buffer = bytearray(stride * n)
    offsets = rng.sample(range(n), n)
    # Each tensor holds the buffer (frombuffer counts a reference to it).
    at = [o * stride for o in offsets]
    made = [torch.frombuffer(buffer, dtype=torch.uint8, count=8, offset=a) for a in at]
    ts = list(made)
    for _ in range(rng.choice([0, 0, 1, 3])):
        i = rng.randrange(n)
        pick = rng.randint(0, 3)
        if pick == 0:
            ts.append(made[i])
        elif pick == 1:
            ts.append(made[i][rng.randint(0, 7) :])
        elif pick == 2:
            ts.append(torch.frombuffer(buffer, dtype=torch.uint8, count=4, offset=at[i]))
        else:
            ts.append(torch.empty(0, dtype=torch.uint8))
    rng.shuffle(ts)
    return ts


@pytest.mark.parametrize("seed", range(20))
def test_the_last_fact_says_whether_the_storages_are_distinct(seed):
    rng = random.Random(seed)
    ts = storage_tensors(rng)
    if seed % 4 == 1:
        ts.append(torch.empty(0))  # one tensor without a data pointer: its own
    if seed % 4 == 2:
        ts += [torch.empty(0), torch.empty(0, dtype=torch.bfloat16)]  # two: taken as one
    bases = [t.untyped_storage().data_ptr() for t in ts]
    assert int(core.kinds.tensor_facts(ts)[-1]) == int(len(set(bases)) == len(bases))


def order_rule(ts: list[torch.Tensor], actions: list[int]) -> list[int]:
    """fill_order's rule: per storage the set of (view, action) uses; a storage with more than
    one is filled in order, every entry; otherwise each view once."""
    keys = []
    for t in ts:
        storage = t.untyped_storage().data_ptr()
        keys.append((storage, (storage, t.data_ptr(), t.dtype, tuple(t.shape), t.stride())))
    uses: dict = {}
    for (storage, view), action in zip(keys, actions):
        uses.setdefault(storage, set()).add((view, action))
    out, seen = [], set()
    for i, (storage, view) in enumerate(keys):
        ordered = len(uses[storage]) > 1
        if ordered or view not in seen:
            seen.add(view)
            out += [i, int(ordered)]
    return out


@pytest.mark.parametrize("seed", range(20))
def test_the_fill_order_numbers_the_storages(seed):
    rng = random.Random(seed)
    ts = storage_tensors(rng)
    for _ in range(rng.randint(0, 40)):  # entries sharing storages, in other views and actions
        t = rng.choice(ts)
        ts.append(rng.choice([t, t[rng.randint(0, 4) :], t.view(torch.int8)]))
    actions = [rng.choice([0, 0, 0, 1, 2]) for _ in ts]
    got = torch.ops.fp8_dummy_internal.fill_order(ts, actions, [0] * len(ts))
    assert got == order_rule(ts, actions)
