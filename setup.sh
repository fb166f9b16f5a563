#!/usr/bin/env bash
# setup.sh - everything a fresh Debian 12 machine needs to build scaledmm:
# installs the build dependencies from Debian, generates the build system,
# configures into ./build and builds. Safe to run again.
#
#   ./setup.sh && build/tools/scaledmm bench     # the main job
#   ./setup.sh && make -C build check            # the test suite
#
# Arguments are passed to configure, e.g. ./setup.sh CFLAGS="-O3 -g": on
# the first run (when the build directory has no Makefile yet), and on a
# configured build directory too, which they then reconfigure (it says so).
# Without arguments, an existing configuration is kept (it says that too).
# Environment: SMM_SKIP_DEPS=1 skips the package installation; BUILD_DIR
# (default: build) names the build directory; SMM_SETUP_ROCM=1 also installs
# the HIP toolchain of the ROCm backend (Debian's clang-19 and HIP packages),
# e.g. SMM_SETUP_ROCM=1 BUILD_DIR=build-rocm ./setup.sh --with-rocm.
set -eu
cd "$(dirname "$0")"
top=$(pwd)

PACKAGES="build-essential autoconf automake libtool autoconf-archive pkg-config
check libsubunit-dev libopenblas-dev libjansson-dev libdnnl-dev libpcre2-dev
python3-venv python3-dev"
if [ "${SMM_SETUP_ROCM:-0}" = 1 ]; then
    PACKAGES="$PACKAGES clang-19 lld-19 clang-tools-19 llvm-19 libamdhip64-dev rocm-device-libs"
fi

if [ "${SMM_SKIP_DEPS:-0}" != 1 ]; then
    missing=""
    for p in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        echo "setup.sh: installing:$missing" >&2
        SUDO=""
        [ "$(id -u)" = 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
    fi
fi

if [ ! -x configure ] || [ configure.ac -nt configure ]; then autoreconf -fi; fi
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR"
cd "$BUILD_DIR"
if [ ! -f Makefile ]; then
    "$top/configure" "$@"
elif [ $# -gt 0 ]; then
    echo "setup.sh: $BUILD_DIR is already configured; reconfiguring it with: $*" >&2
    "$top/configure" "$@"
else
    args=$(./config.status --config)
    echo "setup.sh: $BUILD_DIR is already configured (configure arguments: ${args:-none});" \
        "keeping it (pass configure arguments to reconfigure)" >&2
fi
make -j"$(nproc)" >&2
