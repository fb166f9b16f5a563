#!/bin/sh
# Runs the CPU backend's bit-exactness suites once per kernel level: every
# level this CPU runs and every portable emulation of a vector level's data
# flow (same packed layout, blocking, +128 shift and compensation as the
# real kernels; they run on any CPU), as the library lists them
# (smm_cpu_levels, through `scaledmm info --levels`). Every level is
# compared with the same reference bits. Levels the library knows but this
# CPU lacks are skipped with a message; any failing run fails the script.
#
# Run from the tests build directory (as `make check` does); SCALEDMM may
# name the CLI (default: ../tools/scaledmm).
SCALEDMM=${SCALEDMM:-../tools/scaledmm}
# The suites use 3 threads on machines with fewer cores; passive waiting
# keeps the oversubscribed runs from spinning (results do not depend on it;
# the suites' own runs under `make check` keep the default policy).
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OMP_WAIT_POLICY
SUITES="check_conformance check_quantize check_vectors check_packed check_cpu_edges check_linear check_epilogue"
# Only the CPU backend changes with the level (the reference is what it is
# compared with); the GPU backends have their runs in the suites themselves.
SMM_TEST_BACKENDS=${SMM_TEST_BACKENDS:-reference,cpu}
export SMM_TEST_BACKENDS

# levels SET: the names `scaledmm info --levels=SET` prints, space-separated.
levels() {
    out=$(SMM_CPU_ISA= "$SCALEDMM" info --levels="$1") || {
        echo "isa-levels.sh: '$SCALEDMM info --levels=$1' failed" >&2
        exit 1
    }
    printf '%s\n' "$out" | tr '\n' ' ' | sed 's/ *$//'
}
runs=$(levels runnable)
all=$(levels all)
emulated=$(levels emulated)
case " $runs " in
*" scalar "*) ;;
*)
    echo "isa-levels.sh: 'scalar' is not among the levels this CPU runs: '$runs'" >&2
    exit 1
    ;;
esac
echo "isa-levels.sh: levels this CPU runs: $runs"
echo "isa-levels.sh: levels the library knows: $all; emulations: $emulated"

failed=0
# chosen CAP WANT: with SMM_CPU_ISA=CAP, contexts run level WANT.
chosen() {
    got=$(SMM_CPU_ISA=$1 "$SCALEDMM" info --levels=chosen)
    if [ "$got" = "$2" ]; then
        echo "isa-levels.sh: PASS SMM_CPU_ISA=$1 chooses $2"
    else
        echo "isa-levels.sh: FAIL SMM_CPU_ISA=$1 chooses '$got', not $2" >&2
        failed=1
    fi
}
# Each level this CPU runs caps the choice at itself (in any case); a
# level it lacks caps the choice at the highest level it runs below that
# one (the library lists the levels in ascending order: AVX-512 VNNI
# without AVX-VNNI runs avx2 under SMM_CPU_ISA=avx_vnni); an emulation is
# chosen by its name.
highest=
for level in $runs; do
    chosen "$level" "$level"
    highest=$level
done
chosen "$(printf '%s' "$highest" | tr a-z A-Z)" "$highest"
chosen c scalar
below=scalar
for level in $all; do
    case " $runs " in
    *" $level "*) below=$level ;;
    *) chosen "$level" "$below" ;;
    esac
done
for level in $emulated; do
    chosen "$level" "$level"
done

for level in $all $emulated; do
    case " $runs $emulated " in
    *" $level "*) ;;
    *)
        echo "isa-levels.sh: SKIP $level (this CPU does not run it)"
        continue
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
