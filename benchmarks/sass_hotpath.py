"""The hot path of a kernel in its SASS (cuobjdump -sass text), counted statically: for
benchmarks/sass_report.py (the rules: docs/cuda.md, "Predicted speed from the SASS")."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class Instr:
    addr: int
    pred: str | None
    op: str
    args: str

    @property
    def base(self) -> str:
        return self.op.split(".")[0]


LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")


def parse_functions(sass: str) -> dict[str, list[Instr]]:
    funcs: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        m = LINE.search(line)
        if m and current is not None:
            pred = m.group(2).strip()[1:] if m.group(2) else None
            current.append(Instr(int(m.group(1), 16), pred, m.group(3), m.group(4).strip()))
    return funcs


def store_width(ins: Instr) -> int:
    """Bytes one global store writes per thread (0: not a global store)."""
    if ins.base not in ("STG", "ST"):
        return 0
    mods = ins.op.split(".")[1:]
    for mod, width in (("128", 16), ("64", 8), ("U8", 1), ("S8", 1), ("U16", 2), ("S16", 2)):
        if mod in mods:
            return width
    return 4


def imad_weight(ins: Instr) -> int:
    """Issue cycles on the half-rate integer multiply pipe (IMAD.WIDE writes two registers)."""
    if ins.base in ("IMAD", "IMUL"):
        return 2 if "WIDE" in ins.op.split(".") else 1
    return 0


def dests(ins: Instr) -> set[str]:
    """Predicate registers an instruction may write (its first two operands)."""
    return {a.strip() for a in ins.args.split(",")[:2]}


def hw_fp8(ins: Instr) -> int:
    """1 for a hardware FP8 conversion (sm_89+): the path that holds them is the common one
    (the software conversion beside it is the fallback for bounds beyond the hardware's)."""
    return int(ins.base == "F2FP" and ("E4M3" in ins.op or "E5M2" in ins.op))


def target(ins: Instr) -> int | None:
    m = re.search(r"0x([0-9a-f]+)", ins.args)
    return int(m.group(1), 16) if m else None


class HotPath:
    """The cheapest path through a kernel's hot region that writes a full pass's bytes with the
    widest stores: among the paths from the region's head to its end (the grid-stride loop's
    back edge, or EXIT for a kernel without one), the most bytes stored, then the most
    hardware FP8 conversions, then the fewest instructions. Predicated instructions count as
    issued; a CALL counts its callee's cheapest path to RET; inner loops count once (one
    trip)."""

    def __init__(self, code: list[Instr]):
        self.code = code
        self.index = {ins.addr: i for i, ins in enumerate(code)}
        self.callee_memo: dict[int, tuple[int, int]] = {}
        self.refund = self._refunds()

    def _refunds(self) -> dict[int, tuple[int, int]]:
        """Per conditional branch `@X BRA`: bytes of the stores before it in its block that are
        predicated on X (they ran only if the branch is taken: not stored on the fall-through)
        and on !X (not stored if taken). nvcc writes `@!P3 STG.E ...; @!P3 BRA skip` for an
        if/else whose else part stores bytes: both parts' stores must not count at once."""
        targets = {target(x) for x in self.code if x.base == "BRA"}
        out: dict[int, tuple[int, int]] = {}
        for i, ins in enumerate(self.code):
            if ins.base != "BRA" or ins.pred in (None, "PT"):
                continue
            x = ins.pred.lstrip("!")
            neg = ins.pred.startswith("!")
            fall = taken = 0
            for j in range(i - 1, -1, -1):
                y = self.code[j]
                if y.base in ("BRA", "EXIT", "RET", "CALL") or x in dests(y):
                    break
                if y.pred and y.pred.lstrip("!") == x and store_width(y):
                    same = y.pred.startswith("!") == neg
                    if same:
                        fall += store_width(y)
                    else:
                        taken += store_width(y)
                if y.addr in targets:
                    break
            if fall or taken:
                out[i] = (fall, taken)
        return out

    def loop(self) -> tuple[int, int] | None:
        """(head, tail) indices of the hot loop: of the backward branches whose range stores,
        the one with the most hardware FP8 conversions (nvcc may unswitch the grid-stride loop
        on the kernel's hardware-conversion flag: the hardware copy is the common one), then
        the outermost."""
        best, best_key = None, None
        for i, ins in enumerate(self.code):
            t = target(ins) if ins.base == "BRA" else None
            if t is None or t > ins.addr or t not in self.index:
                continue
            head = self.index[t]
            span = self.code[head : i + 1]
            if not any(store_width(x) for x in span):
                continue
            key = (sum(hw_fp8(x) for x in span), i - head)
            if best_key is None or key > best_key:
                best, best_key = (head, i), key
        return best

    def callee(self, start: int) -> tuple[int, int]:
        """(instructions, multiply-pipe weight) of the cheapest path from start to RET."""
        if start in self.callee_memo:
            return self.callee_memo[start]
        self.callee_memo[start] = (0, 0)  # recursion guard
        i0 = self.index[start]
        inf = (10**9, 0)
        best: dict[int, tuple[int, int]] = {}
        end = len(self.code)
        for i in range(end - 1, i0 - 1, -1):
            ins = self.code[i]
            own = (1, imad_weight(ins))
            if ins.base == "RET":
                best[i] = (
                    own if ins.pred is None else min(own, self._add(own, best.get(i + 1, inf)))
                )
                continue
            options = []
            for s in self._succ(i, i0, end - 1, allow_back=False):
                options.append(best.get(s, inf))
            if not options:
                best[i] = inf
                continue
            best[i] = self._add(own, min(options))
        self.callee_memo[start] = best.get(i0, inf)
        return self.callee_memo[start]

    def path(self) -> list[Instr]:
        """The instructions of the path count() chose (callees not expanded)."""
        out, i = [], self.start
        while i is not None:
            out.append(self.code[i])
            i = self.choice.get(i)
        return out

    @staticmethod
    def _add(a, b):
        return (a[0] + b[0], a[1] + b[1])

    def _succ(self, i: int, lo: int, hi: int, allow_back: bool) -> list[int]:
        """Forward successors of instruction i inside [lo, hi]."""
        ins = self.code[i]
        out = []
        conditional = ins.pred not in (None, "PT")
        if ins.base == "BRA":
            t = target(ins)
            if t is not None and t in self.index and lo <= self.index[t] <= hi:
                if self.index[t] > i or allow_back:
                    out.append(self.index[t])
            if conditional and i + 1 <= hi:
                out.append(i + 1)
        elif ins.base in ("EXIT", "RET", "BRX", "JMX", "JMP", "BPT"):
            if conditional and i + 1 <= hi:
                out.append(i + 1)
        elif i + 1 <= hi:
            out.append(i + 1)
        return out

    def _all_succ(self, i: int) -> list[int]:
        """Successors of instruction i anywhere in the function (forward or backward)."""
        return self._succ(i, 0, len(self.code) - 1, allow_back=True)

    def _body(self, head: int, tail: int) -> set[int]:
        """The natural loop of the back edge tail -> head: head and every instruction that
        reaches tail without passing head (code nvcc placed out of line after the loop too)."""
        preds: dict[int, list[int]] = {}
        for i in range(len(self.code)):
            for s in self._all_succ(i):
                preds.setdefault(s, []).append(i)
        body, todo = {head, tail}, [tail]
        while todo:
            for p in preds.get(todo.pop(), []):
                if p not in body:
                    body.add(p)
                    todo.append(p)
        return body

    def count(self) -> tuple[float, float, int, int, bool]:
        """(instructions, multiply weight, bytes stored, widest store, is a loop) of the path."""
        region = self.loop()
        looped = region is not None
        if looped:
            start, tail = region
            body = self._body(start, tail)
        else:
            start, body = 0, set(range(len(self.code)))
        head_addr = self.code[start].addr
        # The body without its cycles: DFS from the start, dropping the edges into the start
        # (the pass ends there) and those closing an inner loop (it counts one trip).
        edges: dict[int, list[int]] = {}
        state: dict[int, int] = {start: 1}  # 1 on the stack, 2 done
        order: list[int] = []
        stack = [(start, iter(self._all_succ(start)))]
        while stack:
            i, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[i] = 2
                order.append(i)
                continue
            if nxt not in body or nxt == start or state.get(nxt) == 1:
                continue
            edges.setdefault(i, []).append(nxt)
            if nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(self._all_succ(nxt))))
        # value = (stored bytes, hardware FP8 conversions, -instructions, -imad weight, widest
        # store); larger is better
        none = (-1, 0, 0, 0, 0)
        best: dict[int, tuple[int, int, int, int, int]] = {}
        self.choice: dict[int, int | None] = {}
        for i in order:  # post-order: successors first
            ins = self.code[i]
            n, w = 1, imad_weight(ins)
            if ins.base == "CALL" and target(ins) in self.index:
                cn, cw = self.callee(target(ins))
                n, w = n + cn, w + cw
            st = store_width(ins)
            options = []
            fall, taken = self.refund.get(i, (0, 0))
            for s in edges.get(i, []):
                v = best.get(s, none)
                back = fall if s == i + 1 and s != self.index.get(target(ins)) else taken
                if v[0] >= 0 and back:
                    v = (v[0] - back, *v[1:])
                options.append((v, s))
            if (looped and ins.base == "BRA" and target(ins) == head_addr) or (
                not looped and ins.base == "EXIT"
            ):
                options.append(((0, 0, 0, 0, 0), None))  # the back edge taken / exit: the pass ends
            options = [o for o in options if o[0][0] >= 0]
            if not options:
                best[i] = none
                continue
            b, self.choice[i] = max(options, key=lambda o: o[0])
            best[i] = (b[0] + st, b[1] + hw_fp8(ins), b[2] - n, b[3] - w, max(b[4], st))
        v = best.get(start, none)
        self.start = start
        if v[0] <= 0:
            raise RuntimeError("no path through the hot region stores anything")
        return -v[2], -v[3], v[0], v[4], looped
