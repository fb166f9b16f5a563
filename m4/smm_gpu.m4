# SMM_GPU
# -------
# The GPU backends' toolchains. Both build the same HIP sources (lib/rocm/)
# into a plugin shared object that libscaledmm loads at run time:
#
#   --with-rocm[=PATH]       libscaledmm-rocm.so, for AMD GPUs. The compiler
#                            is PATH/bin/amdclang++ (or PATH/llvm/bin/),
#                            else /opt/rocm/llvm/bin/amdclang++, else
#                            Debian's clang++-19 with -nogpulib (packages
#                            clang-19 lld-19 clang-tools-19 llvm-19
#                            libamdhip64-dev rocm-device-libs). HIPCXX
#                            overrides the search.
#   --with-rocm-arch=LIST    code objects for these gfx targets
#                            (default "gfx942 gfx90a").
#   --with-cuda[=PATH]       libscaledmm-cuda.so, for NVIDIA GPUs, with
#                            PATH/bin/nvcc (else nvcc on PATH, else
#                            /usr/local/cuda/bin/nvcc; NVCC overrides).
#   --with-cuda-arch=LIST    SASS for these sm_XX targets plus PTX of the
#                            last one (default "sm_90a sm_90": the Hopper-only
#                            wgmma/TMA kernels need sm_90a; sm_90 SASS and
#                            compute_90 PTX serve the rest).
#
# A toolchain that was asked for and does not compile a small kernel stops
# configure. Substitutes HIPCXX, HIP_CXXFLAGS, HIP_LDFLAGS, HIP_LIBS, NVCC,
# NVCC_FLAGS, NVCC_LDFLAGS; conditionals SMM_ROCM and SMM_CUDA; defines
# SMM_BUILD_ROCM / SMM_BUILD_CUDA in config.h.
AC_DEFUN([SMM_GPU], [
  AC_ARG_WITH([rocm],
    [AS_HELP_STRING([--with-rocm@<:@=PATH@:>@],
      [build the AMD GPU backend (libscaledmm-rocm.so) with ROCm at PATH, or
       Debian's clang-19 and HIP packages @<:@default: no@:>@])],
    [], [with_rocm=no])
  AC_ARG_WITH([rocm-arch],
    [AS_HELP_STRING([--with-rocm-arch=LIST],
      [AMD GPU targets to build code objects for @<:@default: "gfx942 gfx90a"@:>@])],
    [], [with_rocm_arch="gfx942 gfx90a"])
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=PATH@:>@],
      [build the NVIDIA GPU backend (libscaledmm-cuda.so) from the same HIP
       sources with nvcc (CUDA toolkit at PATH) @<:@default: no@:>@])],
    [], [with_cuda=no])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST],
      [NVIDIA targets (sm_XX) to build SASS for, plus PTX of the last
       @<:@default: "sm_90a sm_90"@:>@])],
    [], [with_cuda_arch="sm_90a sm_90"])
  AC_ARG_VAR([HIPCXX], [HIP compiler for the ROCm backend (amdclang++ or clang++-19)])
  AC_ARG_VAR([NVCC], [CUDA compiler for the CUDA backend])

  # A kernel using the portability header's index macros, and the runtime
  # calls the backend makes.
  smm_gpu_probe_src='#include "gpu_compat.h"
__global__ void smm_probe_kernel(int *p) { p@<:@SMM_TID_X@:>@ = SMM_BID_X; }
int smm_probe(int *p) {
    int n = 0;
    smm_probe_kernel<<<1, 64>>>(p);
    (void)gpuGetDeviceCount(&n);
    return n;
}'

  # ------------------------------ ROCm ------------------------------
  smm_rocm=no
  HIP_CXXFLAGS=
  HIP_LDFLAGS=
  HIP_LIBS=
  AS_IF([test "x$with_rocm" != xno], [
    smm_rocm_path=
    AS_IF([test "x$with_rocm" != xyes], [smm_rocm_path=$with_rocm])
    smm_hip_kind=
    AS_IF([test -n "$HIPCXX"], [
      AS_CASE([`basename "$HIPCXX"`], [amdclang*], [smm_hip_kind=rocm], [smm_hip_kind=debian])
    ], [
      smm_cands="/opt/rocm/llvm/bin/amdclang++ /opt/rocm/bin/amdclang++"
      AS_IF([test -n "$smm_rocm_path"],
            [smm_cands="$smm_rocm_path/bin/amdclang++ $smm_rocm_path/llvm/bin/amdclang++ $smm_cands"])
      for smm_c in $smm_cands; do
        AS_IF([test -x "$smm_c"], [HIPCXX=$smm_c; smm_hip_kind=rocm; break])
      done
      AS_IF([test -z "$HIPCXX"], [
        AC_PATH_PROGS([smm_clang19], [clang++-19], [], [$PATH:/usr/lib/llvm-19/bin])
        AS_IF([test -n "$smm_clang19"], [HIPCXX=$smm_clang19; smm_hip_kind=debian])
      ])
    ])
    AC_MSG_CHECKING([for a HIP compiler])
    AS_IF([test -z "$HIPCXX"],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--with-rocm: no HIP compiler found (looked for amdclang++ in $smm_cands and for clang++-19). Install ROCm, or on Debian: apt-get install clang-19 lld-19 clang-tools-19 llvm-19 libamdhip64-dev rocm-device-libs; or set HIPCXX])])
    AC_MSG_RESULT([$HIPCXX])
    AS_IF([test "x$smm_hip_kind" = xrocm], [
      AS_IF([test -z "$smm_rocm_path"],
            [smm_rocm_path=`dirname "$HIPCXX"`
             smm_rocm_path=`dirname "$smm_rocm_path"`
             AS_CASE([$smm_rocm_path], [*/llvm], [smm_rocm_path=`dirname "$smm_rocm_path"`])])
      HIP_CXXFLAGS="--rocm-path=$smm_rocm_path"
      HIP_LDFLAGS="-L$smm_rocm_path/lib -Wl,-rpath,$smm_rocm_path/lib"
    ], [
      # Debian: HIP headers and libamdhip64 under /usr, no gfx942 device
      # library (the sources need none).
      HIP_CXXFLAGS="--rocm-path=${smm_rocm_path:-/usr} -nogpulib"
      AS_IF([test -n "$smm_rocm_path"], [HIP_LDFLAGS="-L$smm_rocm_path/lib"])
    ])
    for smm_a in $with_rocm_arch; do
      HIP_CXXFLAGS="$HIP_CXXFLAGS --offload-arch=$smm_a"
    done
    # The numerics contract: no contraction, no flush-to-zero.
    HIP_CXXFLAGS="-x hip $HIP_CXXFLAGS -ffp-contract=off -fno-gpu-flush-denormals-to-zero -fno-fast-math"
    HIP_LIBS="-lamdhip64"

    AC_MSG_CHECKING([whether $HIPCXX builds HIP code for $with_rocm_arch])
    smm_dir=`mktemp -d 2>/dev/null || echo ./conftest.hipdir`
    mkdir -p "$smm_dir"
    printf '%s\n' "$smm_gpu_probe_src" > "$smm_dir/probe.hip"
    # -O3 as in lib/Makefile.am: unoptimised device code keeps the HIP
    # headers' __assert_fail, which needs the (absent) device library.
    AS_IF([$HIPCXX $HIP_CXXFLAGS -O3 -fPIC -I"$srcdir/lib/rocm" -c "$smm_dir/probe.hip" \
             -o "$smm_dir/probe.o" >"$smm_dir/log" 2>&1 &&
           $HIPCXX -shared $HIP_LDFLAGS -o "$smm_dir/probe.so" "$smm_dir/probe.o" $HIP_LIBS \
             >>"$smm_dir/log" 2>&1],
      [AC_MSG_RESULT([yes])
       smm_rocm=yes],
      [AC_MSG_RESULT([no])
       cat "$smm_dir/log" >&AS_MESSAGE_LOG_FD
       smm_log=`head -n 5 "$smm_dir/log"`
       rm -rf "$smm_dir"
       AC_MSG_ERROR([--with-rocm: $HIPCXX cannot build a HIP kernel for $with_rocm_arch and link it with -lamdhip64:
$smm_log
(on Debian: apt-get install clang-19 lld-19 clang-tools-19 llvm-19 libamdhip64-dev rocm-device-libs; see config.log)])])
    rm -rf "$smm_dir"
  ])

  # ------------------------------ CUDA ------------------------------
  smm_cuda=no
  NVCC_FLAGS=
  NVCC_LDFLAGS=
  AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test -z "$NVCC"], [
      AS_IF([test "x$with_cuda" != xyes],
        [AS_IF([test -x "$with_cuda/bin/nvcc"], [NVCC=$with_cuda/bin/nvcc])],
        [AC_PATH_PROG([smm_nvcc], [nvcc], [], [$PATH:/usr/local/cuda/bin])
         NVCC=$smm_nvcc])
    ])
    AC_MSG_CHECKING([for the CUDA compiler])
    AS_IF([test -z "$NVCC"],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--with-cuda: nvcc not found (looked in PATH/bin for --with-cuda=PATH, else on \$PATH and in /usr/local/cuda/bin); install the CUDA toolkit, pass --with-cuda=PATH, or set NVCC])])
    AC_MSG_RESULT([$NVCC])
    smm_last=
    for smm_a in $with_cuda_arch; do
      smm_n=`echo "$smm_a" | sed 's/^sm_//; s/^compute_//'`
      NVCC_FLAGS="$NVCC_FLAGS -gencode arch=compute_$smm_n,code=sm_$smm_n"
      smm_last=$smm_n
    done
    AS_IF([test -z "$smm_last"], [AC_MSG_ERROR([--with-cuda-arch: empty list])])
    NVCC_FLAGS="$NVCC_FLAGS -gencode arch=compute_$smm_last,code=compute_$smm_last"
    # The numerics contract: no fused multiply-add behind our back, no
    # flush-to-zero, IEEE division and square root.
    NVCC_FLAGS="-x cu $NVCC_FLAGS --fmad=false --ftz=false --prec-div=true --prec-sqrt=true -Xcompiler -fPIC"
    AC_MSG_CHECKING([whether $NVCC builds CUDA code for $with_cuda_arch])
    smm_dir=`mktemp -d 2>/dev/null || echo ./conftest.cudadir`
    mkdir -p "$smm_dir"
    printf '%s\n' "$smm_gpu_probe_src" > "$smm_dir/probe.hip"
    AS_IF([$NVCC $NVCC_FLAGS -O3 -I"$srcdir/lib/rocm" -c "$smm_dir/probe.hip" -o "$smm_dir/probe.o" \
             >"$smm_dir/log" 2>&1 &&
           $NVCC -shared $NVCC_LDFLAGS -o "$smm_dir/probe.so" "$smm_dir/probe.o" >>"$smm_dir/log" 2>&1],
      [AC_MSG_RESULT([yes])
       smm_cuda=yes],
      [AC_MSG_RESULT([no])
       cat "$smm_dir/log" >&AS_MESSAGE_LOG_FD
       smm_log=`head -n 5 "$smm_dir/log"`
       rm -rf "$smm_dir"
       AC_MSG_ERROR([--with-cuda: $NVCC cannot build a kernel for $with_cuda_arch:
$smm_log
(see config.log)])])
    rm -rf "$smm_dir"
  ])

  AS_IF([test "x$smm_rocm" = xyes],
        [AC_DEFINE([SMM_BUILD_ROCM], [1], [Define to 1 when the ROCm plugin is built.])])
  AS_IF([test "x$smm_cuda" = xyes],
        [AC_DEFINE([SMM_BUILD_CUDA], [1], [Define to 1 when the CUDA plugin is built.])])
  AM_CONDITIONAL([SMM_ROCM], [test "x$smm_rocm" = xyes])
  AM_CONDITIONAL([SMM_CUDA], [test "x$smm_cuda" = xyes])
  AC_SUBST([HIPCXX])
  AC_SUBST([HIP_CXXFLAGS])
  AC_SUBST([HIP_LDFLAGS])
  AC_SUBST([HIP_LIBS])
  AC_SUBST([NVCC])
  AC_SUBST([NVCC_FLAGS])
  AC_SUBST([NVCC_LDFLAGS])
  AC_SUBST([SMM_ROCM_ARCH], [$with_rocm_arch])
  AC_SUBST([SMM_CUDA_ARCH], [$with_cuda_arch])

  # The loader (lib/gpu_loader.c) is always built: dlopen.
  AC_SEARCH_LIBS([dlopen], [dl])
])
