#!/bin/sh
# Runs the CPU backend's bit-exactness suites once per kernel level: the
# portable C level (SMM_CPU_ISA=scalar), every vector level this CPU runs
# (avx2, avx_vnni, avx512_vnni, amx_int8, as the library's probe reports
# them), and the portable emulations of the VNNI and AMX data flows (same
# packed layouts, blocking, +128 shift and compensation as the real
# kernels; they run on any CPU).
# Every level is compared with the same reference bits. Levels this CPU
# lacks are skipped with a message; any failing run fails the script.
#
# Run from the tests build directory (as `make check` does); SCALEDMM may
# name the CLI (default: ../tools/scaledmm).
SCALEDMM=${SCALEDMM:-../tools/scaledmm}
# The suites use 3 threads on machines with fewer cores; passive waiting
# keeps the oversubscribed runs from spinning (results do not depend on it;
# the suites' own runs under `make check` keep the default policy).
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OMP_WAIT_POLICY
SUITES="check_conformance check_quantize check_vectors check_packed check_cpu_edges"
# Only the CPU backend changes with the level (the reference is what it is
# compared with); the GPU backends have their runs in the suites themselves.
SMM_TEST_BACKENDS=${SMM_TEST_BACKENDS:-reference,cpu}
export SMM_TEST_BACKENDS

# The cpu backend's line of `scaledmm info` ends with
# "levels this CPU runs: scalar avx2 ...; OpenMP ...".
info=$(SMM_CPU_ISA= "$SCALEDMM" info 2>/dev/null) || {
    echo "isa-levels.sh: '$SCALEDMM info' failed" >&2
    exit 1
}
runs=$(printf '%s\n' "$info" | sed -n 's/.*levels this CPU runs: \([a-z0-9_ ]*\).*/\1/p' | head -n 1)
case " $runs " in
*" scalar "*) ;;
*)
    echo "isa-levels.sh: cannot read the levels from '$SCALEDMM info':" >&2
    printf '%s\n' "$info" >&2
    exit 1
    ;;
esac
echo "isa-levels.sh: levels this CPU runs: $runs"

failed=0
# A level named in SMM_CPU_ISA, in any case, is reported as the cap, also
# when it is above every level this CPU runs (amx_int8 on most CPUs).
for cap in SCALAR:scalar Scalar:scalar amx_int8:; do
    line=$(SMM_CPU_ISA=${cap%%:*} "$SCALEDMM" info 2>/dev/null | grep 'levels this CPU runs')
    case "$line" in
    *"level ${cap#*:}"*"SMM_CPU_ISA"*"caps"*) echo "isa-levels.sh: PASS info with SMM_CPU_ISA=${cap%%:*}" ;;
    *)
        echo "isa-levels.sh: FAIL info with SMM_CPU_ISA=${cap%%:*}: $line" >&2
        failed=1
        ;;
    esac
done
for level in scalar avx2 avx_vnni avx512_vnni amx_int8 avx_vnni_emulated avx512_vnni_emulated \
    amx_int8_emulated; do
    case "$level" in
    *_emulated) ;;
    *)
        case " $runs " in
        *" $level "*) ;;
        *)
            echo "isa-levels.sh: SKIP $level (this CPU does not run it)"
            continue
            ;;
        esac
        ;;
    esac
    for suite in $SUITES; do
        echo "isa-levels.sh: SMM_CPU_ISA=$level ./$suite"
        if SMM_CPU_ISA=$level "./$suite"; then
            echo "isa-levels.sh: PASS $level $suite"
        else
            echo "isa-levels.sh: FAIL $level $suite" >&2
            failed=1
        fi
    done
done
exit $failed
