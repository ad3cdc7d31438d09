"""Progress of a whole-model fill: tqdm if installed, else one line on stderr."""

from __future__ import annotations

import sys
import time

import torch


class Progress:
    """Tensors and bytes done, throughput; CUDA synchronized only to show it (each ``interval``)."""

    def __init__(self, total_tensors: int, total_bytes: int, interval: float = 0.5):
        self.total_tensors, self.total_bytes, self.interval = total_tensors, total_bytes, interval
        self.tensors = self.bytes = 0
        self.start = self.last = time.perf_counter()
        try:
            from tqdm.auto import tqdm
        except ImportError:
            self.bar = None
        else:
            kw = dict(unit="B", unit_scale=True, unit_divisor=1024, desc="fp8_dummy")
            self.bar = tqdm(total=total_bytes, **kw)

    def update(self, t: torch.Tensor) -> None:
        self.tensors += 1
        self.bytes += t.numel() * t.element_size()
        now = time.perf_counter()
        if now - self.last < self.interval and self.tensors != self.total_tensors:
            return
        if t.is_cuda:
            torch.cuda.synchronize(t.device)  # so bytes done are bytes written
        self.last = time.perf_counter()
        if self.bar is not None:
            self.bar.n = self.bytes
            self.bar.set_postfix_str(f"{self.tensors}/{self.total_tensors} tensors")
            self.bar.refresh()
            return
        gib = f"{self.bytes / 2**30:.2f}/{self.total_bytes / 2**30:.2f} GiB"
        rate = self.bytes / max(self.last - self.start, 1e-9) / 1e9
        text = f"\r[fp8_dummy] {self.tensors}/{self.total_tensors} tensors, {gib}, {rate:.2f} GB/s"
        print(text, end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            print(file=sys.stderr)
