#!/bin/sh
# Errors of the CLI that its suites cannot reach:
# - it fails (exit status 1, a message on stderr) when its standard output
#   cannot be written, for every command that only prints: info, --help,
#   --version, help [COMMAND], COMMAND --help. Output to /dev/full (every
#   write fails with ENOSPC) and to a closed stdout; /dev/null is the
#   control that must pass;
# - `check` refuses an SMM_TEST_SEED that is not a number (exit status 2)
#   instead of running on another seed than the one asked for;
# - an empty path (checkpoint, input, output, reference) is a usage error
#   (exit status 2), not a path to "/config.json"; so is `bench` with both
#   --model and --checkpoint, or with --wide and a format other than the
#   table, or --wide=VALUE; `bench --help` fits 24 lines;
# - `info --json` with an SMM_BACKEND that makes contexts on AUTO fail
#   gives "auto": null, as the text says "AUTO: nothing"; otherwise the
#   text gives AUTO's whole answer ("host data -> ...; device data -> ...");
# - `check` with an SMM_BACKEND that names no backend fails (exit status 1)
#   and says so, as info and bench do, instead of checking other backends.
#
# Run from the tests build directory (as `make check` does); SCALEDMM may
# name the CLI (default: ../tools/scaledmm).
SCALEDMM=${SCALEDMM:-../tools/scaledmm}
full=yes
if ! [ -c /dev/full ] || ! [ -w /dev/full ]; then
    echo "cli-errors.sh: no writable /dev/full: only the closed-stdout cases"
    full=no
fi
fail=0
err=$(mktemp) || exit 1
trap 'rm -f "$err"' EXIT
# expect RC PATTERN WHAT: the command just run (exit status in $rc, stderr
# in $err) must have exited with RC and written PATTERN to stderr.
expect() {
    if [ "$rc" -ne "$1" ] || ! grep -q -e "$2" "$err"; then
        echo "FAIL: $3: exit $rc, expected $1 and a message matching '$2':"
        cat "$err"; fail=1
    else
        echo "ok: $3: exit $1: $(head -n 1 "$err")"
    fi
}
for args in "info" "info --json" "--help" "--version" "help" "help run" \
            "run --help" "bench --help" "quantize --help"; do
    # shellcheck disable=SC2086 # the words of $args are the arguments
    "$SCALEDMM" $args >/dev/null 2>"$err"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL: scaledmm $args >/dev/null: exit $rc, expected 0"; cat "$err"; fail=1
    fi
    for to in full closed; do
        [ $to = full ] && [ $full = no ] && continue
        if [ $to = full ]; then
            "$SCALEDMM" $args >/dev/full 2>"$err"
        else
            "$SCALEDMM" $args >&- 2>"$err"
        fi
        rc=$?
        expect 1 "cannot write" "scaledmm $args, stdout $to"
    done
done
# Output longer than stdout's buffer, so that the write fails while the
# command runs, not only at the final flush (info printed nothing and
# exited 1 then).
long=/$(printf '%06000d' 0)
for args in "info" "info --json"; do
    [ $full = yes ] || break
    # shellcheck disable=SC2086 # the words of $args are the arguments
    SMM_GPU_PLUGIN_DIR=$long "$SCALEDMM" $args >/dev/full 2>"$err"
    rc=$?
    expect 1 "cannot write" "scaledmm $args, long output to /dev/full"
done
for seed in garbage -1 0x 18446744073709551616; do
    SMM_TEST_SEED=$seed "$SCALEDMM" check --quick >/dev/null 2>"$err"
    rc=$?
    expect 2 "SMM_TEST_SEED" "SMM_TEST_SEED=$seed scaledmm check"
done
# The paths are checked before anything is opened: none of these exist.
while IFS='|' read -r what args; do
    eval "set -- $args"
    "$SCALEDMM" "$@" >/dev/null 2>"$err"
    rc=$?
    expect 2 "$what: empty path" "scaledmm $args"
done <<'END'
CHECKPOINT|run '' --layer l --input x.npy --output y.npy
--input|run ckpt --layer l --input '' --output y.npy
--output|run ckpt --layer l --input x.npy --output ''
CHECKPOINT|accuracy '' --reference ref
--reference|accuracy ckpt --reference ''
--input|accuracy ckpt --reference ref --input ''
INPUT_DIR|quantize '' out
OUTPUT_DIR|quantize in ''
--checkpoint|bench --checkpoint ''
END
"$SCALEDMM" bench --model all --checkpoint ckpt >/dev/null 2>"$err"
rc=$?
expect 2 "exclude each other" "scaledmm bench --model all --checkpoint ckpt"
# --wide is for the table format; it takes no value. Checked before any
# measurement, so these exit at once.
for fmt in csv json; do
    "$SCALEDMM" bench --wide --format $fmt >/dev/null 2>"$err"
    rc=$?
    expect 2 "--wide applies to the table format only" "scaledmm bench --wide --format $fmt"
done
"$SCALEDMM" bench --wide=yes >/dev/null 2>"$err"
rc=$?
expect 2 "option '--wide' takes no argument" "scaledmm bench --wide=yes"
# bench --help fits a screen: the man page carries the rest.
lines=$("$SCALEDMM" bench --help | wc -l)
if [ "$lines" -gt 24 ]; then
    echo "FAIL: scaledmm bench --help: $lines lines, expected at most 24"; fail=1
else
    echo "ok: scaledmm bench --help: $lines lines"
fi
for backend in bogus reference; do
    json=$(SMM_BACKEND=$backend "$SCALEDMM" info --json 2>"$err")
    rc=$?
    want='"auto": null'
    [ $backend = reference ] && want='"auto": "reference"'
    if [ $rc -ne 0 ] || ! printf '%s\n' "$json" | grep -q -e "$want"; then
        echo "FAIL: SMM_BACKEND=$backend scaledmm info --json: exit $rc, expected 0 and $want:"
        printf '%s\n' "$json"; cat "$err"; fail=1
    else
        echo "ok: SMM_BACKEND=$backend scaledmm info --json: $want"
    fi
done
SMM_BACKEND=cdua "$SCALEDMM" check --quick >/dev/null 2>"$err"
rc=$?
expect 1 "SMM_BACKEND=cdua is not a backend name" "SMM_BACKEND=cdua scaledmm check --quick"
out=$(env -u SMM_BACKEND "$SCALEDMM" info 2>"$err")
if ! printf '%s\n' "$out" | grep -q "^AUTO: *host data -> .*; device data -> "; then
    echo "FAIL: scaledmm info: no line \"AUTO: host data -> ...; device data -> ...\":"
    printf '%s\n' "$out"; fail=1
else
    echo "ok: scaledmm info: $(printf '%s\n' "$out" | grep "^AUTO:")"
fi
exit $fail
