"""Independent numpy models of what fp8_dummy must reproduce, written from the
specification (docs/contract.md R1-R9 and the formats' definitions), never from our C++:
cpu_reference (torch's CPU uniform_ + copy_), cuda_reference (its CUDA uniform_ launches,
Philox), stateless (the device-independent mode)."""
