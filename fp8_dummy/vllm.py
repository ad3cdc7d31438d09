"""``fp8_dummy.vllm``: the same module as :mod:`fp8_dummy.engines.vllm`."""

import sys

from .engines import vllm

sys.modules[__name__] = vllm
