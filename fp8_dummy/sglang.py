"""``fp8_dummy.sglang``: the same module as :mod:`fp8_dummy.engines.sglang`."""

import sys

from .engines import sglang

sys.modules[__name__] = sglang
