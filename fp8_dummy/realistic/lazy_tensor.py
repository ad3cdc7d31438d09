"""A tensor of a checkpoint that nobody materializes: :class:`LazyTensor` stands for a block of a
named source tensor (row-major element ``offset + Σ i_d · strides_d`` at index ``i``), follows
the views a weight loader takes of it (narrow, select, transpose, chunk, squeeze, ...), and
when a loader copies it into a parameter (``param.copy_(lazy)``) asks its source to write those
elements into the parameter's view directly: an engine's own loader places the checkpoint
tensor, and no rank holds more of it than its slice. Any other operation (arithmetic, ``cat``,
``item``) gets the block's real values, made for that operation alone (counted in
:data:`materialized`), so a loader that does more than views and copies is still exact. The
common views' layouts are computed directly (:mod:`.lazy_views`); any other view is run on
the stand-in's meta proxy, made only for such an operation.

The reverse direction maps a model's in-memory tensors to checkpoint names: :func:`view_map`
runs a conversion (transformers' ``revert_weight_conversion``) on stand-ins of the model's
tensors and returns, for each checkpoint tensor, where its elements lie in an in-memory one."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..stateless import row_major_strides
from .lazy_views import GENERAL, VIEWS, Layout

__all__ = ["Block", "LazyTensor", "NotAffineError", "materialized", "view_map"]

# write(destination, block): fill ``destination`` (shape = block.shape) with the block's values
Writer = Callable[[torch.Tensor, "Block"], None]
materialized: Counter = Counter()  # source name -> times an operation needed its real values
_aten = torch.ops.aten
_COPIES = {_aten.clone.default, _aten._to_copy.default, _aten.lift_fresh.default}
_COPIES |= {_aten.detach.default, _aten.alias.default, _aten.lift_fresh_copy.default}


class NotAffineError(RuntimeError):
    """An operation whose result is no strided block of its source (and no values to make)."""


@dataclass(frozen=True)
class Block:
    """Elements of the source tensor ``source`` (logical shape ``source_shape``, row-major):
    index ``i`` of a tensor of ``shape`` is element ``offset + Σ i_d · strides_d``."""

    source: str
    source_shape: tuple[int, ...]
    shape: tuple[int, ...]
    offset: int
    strides: tuple[int, ...]

    @classmethod
    def whole(cls, source: str, shape: tuple[int, ...]) -> Block:
        """All of the source tensor ``source`` of ``shape``, in its own order."""
        shape = tuple(shape)
        return cls(source, shape, shape, 0, tuple(row_major_strides(shape)))


_views: dict[Any, bool] = {}  # by operator: its every return a view of an argument


def _is_view(func: Any) -> bool:
    found = _views.get(func)
    if found is None:
        returns = func._schema.returns
        found = _views[func] = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns
        )
    return found


# A loader's view ops take tensors, numbers and lists of numbers: walked by hand, not by pytree
# (whose generic walk was most of a stand-in's cost per view; an engine loads tens of
# thousands of checkpoint tensors through a few views each).
def _scan(items: Any, lazies: list) -> bool:
    """Appends the LazyTensors among ``items`` (arguments; lists and tuples of them, walked)
    to ``lazies``; whether a real tensor is among them too (no block of one source)."""
    mixed = False
    for a in items:
        if isinstance(a, torch.Tensor):
            if type(a) is LazyTensor:
                lazies.append(a)
            else:
                mixed = True
        elif type(a) in (list, tuple) and a and not isinstance(a[0], int):
            mixed = _scan(a, lazies) or mixed
    return mixed


def _proxies(items: Any) -> list:
    """``items`` with each LazyTensor replaced by its proxy (lists and tuples rebuilt)."""
    out = []
    for a in items:
        if type(a) is LazyTensor:
            a = a._proxy
        elif type(a) in (list, tuple) and a and not isinstance(a[0], int):
            a = type(a)(_proxies(a))
        out.append(a)
    return out


class LazyTensor(torch.Tensor):
    """A stand-in (no storage) for a strided block of a named source tensor; see the module."""

    @staticmethod
    def __new__(
        cls,
        proxy: torch.Tensor,
        source: str,
        source_shape: tuple[int, ...],
        source_dtype: torch.dtype,
        writer: Writer | None,
        dtype: torch.dtype | None = None,
        device: torch.device | str = "cpu",
    ) -> LazyTensor:
        layout = (tuple(proxy.shape), proxy.stride(), proxy.storage_offset())
        r = cls._made(proxy, layout, source, source_shape, source_dtype, writer, dtype, device)
        r._p = proxy
        return r

    @classmethod
    def _made(cls, root, layout, source, source_shape, source_dtype, writer, dtype, device):
        """A stand-in for the block ``layout`` of ``root`` (the source's meta storage), its
        proxy made only when an operation needs it (:attr:`_proxy`)."""
        r = torch.Tensor._make_wrapper_subclass(
            cls, layout[0], dtype=dtype or source_dtype, device=device, requires_grad=False
        )
        r._root, r._layout, r._p, r._source = root, layout, None, source
        r._source_shape, r._source_dtype, r._writer = tuple(source_shape), source_dtype, writer
        return r

    @property
    def _proxy(self) -> torch.Tensor:
        """The block as a meta tensor over the source's storage (what the general path runs
        an operation on), made once."""
        p = self._p
        if p is None:
            shape, strides, offset = self._layout
            p = self._p = self._root.as_strided(shape, strides, offset)
        return p

    @classmethod
    def of(
        cls,
        source: str,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        writer: Writer | None,
        device: torch.device | str = "cpu",
    ) -> LazyTensor:
        """The whole source tensor ``source`` of ``shape`` and ``dtype``."""
        base = torch.empty(max(math.prod(shape), 1), dtype=dtype, device="meta")
        proxy = base.as_strided(tuple(shape), row_major_strides(shape), 0)
        return cls(proxy, source, tuple(shape), dtype, writer, device=device)

    def block(self) -> Block:
        shape, strides, offset = self._layout
        return Block(self._source, self._source_shape, tuple(shape), offset, tuple(strides))

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # no values made to print it
        return f"LazyTensor({self._source}, shape={tuple(self.shape)}, dtype={self.dtype})"

    def _at(self, layout: Layout, dtype: torch.dtype | None = None, device=None) -> LazyTensor:
        """The block ``layout`` of the same source (a view: computed by :mod:`.lazy_views`, or
        the layout of the op's answer on the meta proxy)."""
        return LazyTensor._made(
            self._root,
            layout,
            self._source,
            self._source_shape,
            self._source_dtype,
            self._writer,
            dtype or self.dtype,
            device or self.device,
        )

    def values(self) -> torch.Tensor:
        """The block's real values, in this tensor's dtype, on the CPU."""
        if self._writer is None:
            raise NotAffineError(f"{self._source}: no values to make (a name map only)")
        materialized[self._source] += 1
        out = torch.empty(self.shape, dtype=self._source_dtype)
        self._writer(out, self.block())
        return out.to(self.dtype)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _aten.copy_.default and isinstance(args[1], LazyTensor):
            dst, src = args[0], args[1]
            if not isinstance(dst, LazyTensor):
                src._write_into(dst)
                return dst
        if func in _COPIES and isinstance(args[0], LazyTensor):
            src = args[0]
            dtype = kwargs.get("dtype") or src.dtype
            # a copy keeps the values: the same block, in its own (contiguous) layout
            return src._at(src._layout, dtype=dtype, device=kwargs.get("device"))
        view = VIEWS.get(func)
        if view is not None and type(args[0]) is LazyTensor and not kwargs:
            out = view(args[0]._layout, *args[1:])
            if out is not GENERAL:
                first = args[0]
                return [first._at(v) for v in out] if type(out) is list else first._at(out)
        if _is_view(func):
            lazies: list[LazyTensor] = []
            values = kwargs.values()
            if not _scan(args, lazies) and not _scan(values, lazies) and len(lazies) == 1:
                first = lazies[0]
                try:
                    out = func(*_proxies(args), **dict(zip(kwargs, _proxies(values))))
                except RuntimeError:  # no view of the block (a reshape across its strides)
                    out = None
                root = first._proxy  # inside dispatch views carry no _base: their storage tells
                views = out if isinstance(out, (list, tuple)) else [out]
                if out is not None and all(
                    isinstance(v, torch.Tensor) and torch._C._is_alias_of(v, root) for v in views
                ):
                    wrapped = [first._at((tuple(v.shape), v.stride(), v.storage_offset()))
                               for v in views]  # fmt: skip
                    return type(out)(wrapped) if isinstance(out, (list, tuple)) else wrapped[0]
        # anything else: the real values, made for this operation
        real = tree_map(lambda a: a.values() if isinstance(a, LazyTensor) else a, (args, kwargs))
        return func(*real[0], **real[1])

    def _write_into(self, dst: torch.Tensor) -> None:
        """``dst.copy_(self)``: the block's values written into ``dst`` (broadcast as copy_
        does; converted from the source's dtype through this tensor's, as copies would)."""
        if self._writer is None:
            raise NotAffineError(f"{self._source}: no values to write (a name map only)")
        proxy = self._proxy
        if tuple(proxy.shape) != tuple(dst.shape):
            proxy = proxy.expand(dst.shape)  # copy_'s broadcast: a stride of 0
        blk = Block(
            self._source,
            self._source_shape,
            tuple(dst.shape),
            proxy.storage_offset(),
            proxy.stride(),
        )
        if dst.dtype == self._source_dtype == self.dtype:
            self._writer(dst, blk)
            return
        tmp = torch.empty(dst.shape, dtype=self._source_dtype, device=dst.device)
        self._writer(tmp, blk)
        dst.copy_(tmp.to(self.dtype))


def view_map(
    convert: Callable[[dict[str, torch.Tensor]], Mapping[str, Any]],
    tensors: Mapping[str, torch.Tensor],
) -> dict[str, Block]:
    """``convert`` (in-memory name -> tensor) -> (checkpoint name -> tensor) run on stand-ins:
    each checkpoint tensor's :class:`Block` of an in-memory tensor; NotAffineError when the
    conversion does more than views and copies."""
    lazy = {n: LazyTensor.of(n, tuple(t.shape), t.dtype, None) for n, t in tensors.items()}
    with torch.no_grad():
        out = convert(lazy)
    blocks = {}
    for name, t in out.items():
        t = t[0] if isinstance(t, list) else t
        if not isinstance(t, LazyTensor):
            raise NotAffineError(f"{name}: the conversion made it from values, not a view")
        blocks[name] = t.block()
    return blocks
