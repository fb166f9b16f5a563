#!/bin/sh
# A Check suite refuses an SMM_TEST_SEED that is not a seed: it runs
# nothing and exits 99 (automake's hard error) with a message, instead of
# passing or failing on another seed than the one a replay asked for. One
# suite stands for all (they share tu_main in testutil.c).
#
# Run from the tests build directory (as `make check` does).
fail=0
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
for seed in garbage -1 0x ' 5' 18446744073709551616; do
    SMM_TEST_SEED=$seed ./check_vectors >"$out" 2>&1
    rc=$?
    if [ $rc -ne 99 ] || ! grep -q SMM_TEST_SEED "$out" || grep -q Checks "$out"; then
        echo "FAIL: SMM_TEST_SEED='$seed' ./check_vectors: exit $rc, expected 99, a message and no tests run:"
        cat "$out"; fail=1
    else
        echo "ok: SMM_TEST_SEED='$seed': exit 99: $(head -n 1 "$out")"
    fi
done
exit $fail
