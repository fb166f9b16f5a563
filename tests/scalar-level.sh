#!/bin/sh
# Runs the conformance suites again with the CPU backend capped to its
# portable C kernels (SMM_CPU_ISA=scalar), so every kernel level this
# machine can run is compared with the same reference bits.
set -e
SMM_CPU_ISA=scalar ./check_conformance
SMM_CPU_ISA=scalar ./check_quantize
SMM_CPU_ISA=scalar ./check_vectors
