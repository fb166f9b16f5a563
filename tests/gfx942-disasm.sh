#!/bin/sh
# gfx942-disasm.sh - the ROCm backend's device code really uses the matrix
# cores: disassembles the AMD code objects the build made from lib/rocm/*.hip
# (--with-rocm) and checks for the MFMA instructions the kernels are written
# with:
#   gfx942 (MI300):  v_mfma_i32_32x32x16_i8 (and reports v_mfma_i32_16x16x32_i8)
#   gfx90a (MI200):  v_mfma_i32_32x32x8i8
# Each object lib/rocm/*.rocm.o of the build carries a .hip_fatbin section,
# an offload bundle with one code object per --with-rocm-arch; the script
# takes it out (objcopy), splits it (clang-offload-bundler) and disassembles
# each code object (llvm-objdump).
#
# Exit status: 0 pass, 1 fail, 77 skip (no ROCm build here, no llvm-objdump
# or clang-offload-bundler, or the build has neither gfx942 nor gfx90a).
# Environment: SMM_TOP_BUILDDIR (default ..: make check runs this in tests/),
# LLVM_OBJDUMP, CLANG_OFFLOAD_BUNDLER, OBJCOPY override the tools.
# Machine-readable lines on stdout ("<arch> <instruction> <count>"), the
# reasons on stderr.

top=${SMM_TOP_BUILDDIR:-..}
plugin=$top/lib/libscaledmm-rocm.so
me=gfx942-disasm

if test ! -f "$plugin"; then
    echo "$me: SKIP: no ROCm build ($plugin not built; configure --with-rocm)" >&2
    exit 77
fi

# The first tool of a list that runs.
find_tool() {
    for t in "$@"; do
        if test -n "$t" && "$t" --version >/dev/null 2>&1; then
            echo "$t"
            return 0
        fi
    done
    return 1
}

objdump=$(find_tool "$LLVM_OBJDUMP" llvm-objdump-19 /opt/rocm/llvm/bin/llvm-objdump \
    llvm-objdump) || {
    echo "$me: SKIP: no llvm-objdump (install llvm-19, or set LLVM_OBJDUMP)" >&2
    exit 77
}
bundler=$(find_tool "$CLANG_OFFLOAD_BUNDLER" clang-offload-bundler-19 \
    /opt/rocm/llvm/bin/clang-offload-bundler clang-offload-bundler) || {
    echo "$me: SKIP: no clang-offload-bundler (install clang-tools-19, or set" \
        "CLANG_OFFLOAD_BUNDLER)" >&2
    exit 77
}
objcopy=$(find_tool "$OBJCOPY" llvm-objcopy-19 /opt/rocm/llvm/bin/llvm-objcopy objcopy) || {
    echo "$me: SKIP: no objcopy" >&2
    exit 77
}

objects=
for o in "$top"/lib/rocm/*.rocm.o; do
    test -f "$o" && objects="$objects $o"
done
if test -z "$objects"; then
    echo "$me: FAIL: $plugin exists but no $top/lib/rocm/*.rocm.o objects" >&2
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/$me.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# Disassemble every code object of every object file, one listing per arch.
for o in $objects; do
    b=$(basename "$o" .o)
    if ! "$objcopy" --dump-section .hip_fatbin="$tmp/$b.fatbin" "$o" "$tmp/$b.copy" \
        2>"$tmp/err"; then
        # Host-only objects (the plugin glue, the selection, the NVIDIA
        # kernel files in an AMD build) may carry no device code; the AMD
        # kernels' objects must.
        case $b in
        gemm_generic.rocm | gemm_mfma.rocm | quantize.rocm)
            echo "$me: FAIL: $o has no .hip_fatbin section: $(cat "$tmp/err")" >&2
            exit 1 ;;
        esac
        echo "$me: $b: no device code (host-only object)" >&2
        continue
    fi
    targets=$("$bundler" --list --type=o --input="$tmp/$b.fatbin") || {
        echo "$me: FAIL: cannot list the offload bundle of $o" >&2
        exit 1
    }
    for t in $targets; do
        case $t in
        hip*-amdgcn-amd-amdhsa-*) ;;
        *) continue ;;
        esac
        arch=${t##*-}   # gfx942, gfx90a, or gfx90a:xnack+ style
        arch=${arch%%:*}
        if ! "$bundler" --unbundle --type=o --input="$tmp/$b.fatbin" --targets="$t" \
            --output="$tmp/$b.$arch.co"; then
            echo "$me: FAIL: cannot take the $t code object out of $o" >&2
            exit 1
        fi
        if ! "$objdump" -d "$tmp/$b.$arch.co" >>"$tmp/$arch.s"; then
            echo "$me: FAIL: $objdump cannot disassemble the $arch code object of $o" >&2
            exit 1
        fi
    done
done

status=0
checked=0
count() { grep -c "^[[:space:]]*$2[[:space:]]" "$tmp/$1.s"; }
# check ARCH REQUIRED-INSTRUCTION [REPORTED-INSTRUCTION...]
check() {
    arch=$1
    shift
    if test ! -f "$tmp/$arch.s"; then
        echo "$me: no $arch code object in this build (not in --with-rocm-arch)" >&2
        return
    fi
    checked=$((checked + 1))
    first=1
    for insn in "$@"; do
        n=$(count "$arch" "$insn")
        echo "$arch $insn $n"
        if test "$first" = 1 && test "$n" -eq 0; then
            echo "$me: FAIL: no $insn in the $arch code of lib/rocm" >&2
            status=1
        fi
        first=0
    done
}
check gfx942 v_mfma_i32_32x32x16_i8 v_mfma_i32_16x16x32_i8
check gfx90a v_mfma_i32_32x32x8i8

if test "$checked" = 0; then
    echo "$me: SKIP: the build has neither a gfx942 nor a gfx90a code object" >&2
    exit 77
fi
test "$status" = 0 && echo "$me: PASS ($checked architecture(s))" >&2
exit $status
