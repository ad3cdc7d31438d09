"""``fp8_dummy.trtllm``: the same module as :mod:`fp8_dummy.engines.trtllm`."""

import sys

from .engines import trtllm

sys.modules[__name__] = trtllm
