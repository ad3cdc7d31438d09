"""A draft model's attention heads: shared by the plain draft (``draft.py``) and EAGLE-3's
(``eagle3.py``)."""

from __future__ import annotations

__all__ = ["kv_heads"]


def kv_heads(heads: int) -> int:
    """A draft's KV heads for ``heads`` query heads: a quarter as many, or as many where a
    quarter does not divide them (9 heads at width 576, 14 at 448): grouped query attention
    needs a divisor, and every engine's and transformers' attention refuses another."""
    kv = max(1, heads // 4)
    return kv if heads % kv == 0 else heads
