#!/usr/bin/env bash
# fuzz/run.sh [SECONDS] - builds the fuzz targets with clang and libFuzzer
# under AddressSanitizer and UndefinedBehaviorSanitizer, and runs each for
# SECONDS (default 60), seeded from the corpus in tests/data:
#   fuzz_safetensors  st_parse          (safetensors headers)
#   fuzz_index        st_index_validate (model.safetensors.index.json)
#   fuzz_npy          npy_parse         (.npy headers)
#   fuzz_config       ct_config_parse   (config.json's quantization_config and
#                                        its "re:" patterns, matched on names)
# Fails on the first crash, sanitizer report, leak or timeout; the input
# that caused it is kept as $FUZZ_OUT/crash-<target>-* (fix the bug, then add
# the input to tests/data/malformed through tests/data/make_corpus.py).
#
# Environment: FUZZ_CC (default clang; Debian: apt-get install clang
# libclang-rt-14-dev), FUZZ_OUT (default: a new temporary directory).
set -euo pipefail
secs=${1:-60}
case $secs in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
top=$(cd "$(dirname "$0")/.." && pwd)
cc=${FUZZ_CC:-clang}
out=${FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/smm-fuzz.XXXXXX")}
mkdir -p "$out"
jansson=$(pkg-config --cflags --libs jansson 2>/dev/null || echo -ljansson)
pcre2=$(pkg-config --cflags --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=all -Wall -Wextra -Werror"

seeds() {   # seeds TARGET: the corpus files that target reads
    case $1 in
    safetensors) find "$top/tests/data" -type f -name '*.safetensors' ;;
    index) find "$top/tests/data" -type f -name '*.json' ;;
    npy) find "$top/tests/data" -type f -name '*.npy' ;;
    config) find "$top/tests/data/config" -type f -name '*.json' ;;
    esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in safetensors index npy config; do
    echo "fuzz: building fuzz_$t" >&2
    extra=""
    [ "$t" = config ] && extra="$top/checkpoint/ctensors.c $pcre2"
    # shellcheck disable=SC2086
    "$cc" $flags -I"$top/checkpoint" -I"$top/include" "$top/fuzz/fuzz_$t.c" \
        "$top/checkpoint/safetensors.c" "$top/checkpoint/npy.c" $extra $jansson -lm -o "$out/fuzz_$t"
    rm -rf "$out/corpus_$t"
    mkdir -p "$out/corpus_$t"
    n=0
    while IFS= read -r f; do
        cp "$f" "$out/corpus_$t/seed-$n-$(basename "$f")"
        n=$((n + 1))
    done < <(seeds "$t")
    echo "fuzz: running fuzz_$t for $secs s from $n seeds (log: $out/fuzz_$t.log)" >&2
    if "$out/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -dict="$top/fuzz/dict" -artifact_prefix="$out/crash-$t-" -print_final_stats=1 \
        "$out/corpus_$t" >"$out/fuzz_$t.log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^Done' "$out/fuzz_$t.log" >&2 || true
    else
        echo "fuzz: fuzz_$t FAILED; last lines of $out/fuzz_$t.log:" >&2
        tail -n 60 "$out/fuzz_$t.log" >&2
        ls "$out"/crash-"$t"-* 2>/dev/null >&2 || true
        status=1
    fi
done
[ "$status" = 0 ] && echo "fuzz: all targets ran $secs s without a failure" >&2
exit "$status"
