#!/bin/sh
# The checkpoint commands on hostile and ordinary files, end to end:
# - quantize copies every file and folder of the model (1_Pooling/ ...),
#   prints a one-line summary to stderr, and writes a checkpoint that
#   `run --list` and `run` accept; an empty [4, 0] Linear weight stays float;
# - run prints a one-line summary to stderr; --bias takes model or f32;
# - a FIFO as config.json, as model.safetensors or as --input fails with
#   "not a regular file" instead of hanging; so does a directory named
#   config.json; a file given as a directory is "not a directory"; a
#   trailing slash never shows as "//";
# - hostile "re:" patterns are refused in bounded time (Python's re.match
#   rejects them too); an int8 layer that cannot run fails alone, by name,
#   in run and in accuracy (which measures the others and exits 1);
# - bad --bias and --match values are usage errors.
#
# Run from the tests build directory (as `make check` does); SCALEDMM may
# name the CLI (default: ../tools/scaledmm).
SCALEDMM=${SCALEDMM:-../tools/scaledmm}
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
err=$tmp/stderr
if command -v timeout >/dev/null 2>&1; then T="timeout 20"; else T=""; fi
expect() {   # expect RC PATTERN WHAT (exit status in $rc, stderr in $err)
    if [ "$rc" -ne "$1" ] || ! grep -q -e "$2" "$err"; then
        echo "FAIL: $3: exit $rc, expected $1 and a message matching '$2':"
        cat "$err"; fail=1
    else
        echo "ok: $3: exit $1: $(head -n 1 "$err")"
    fi
}
# le64 N: N as 8 little-endian bytes (N < 65536)
le64() { printf "\\$(printf %03o $(($1 % 256)))\\$(printf %03o $(($1 / 256)))\\000\\000\\000\\000\\000\\000"; }
# a float model: dense 2 x 4 F32 with a bias, and an empty [4, 0] Linear
hdr='{"dense.bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"dense.weight":{"dtype":"F32","shape":[2,4],"data_offsets":[8,40]},"empty.weight":{"dtype":"F32","shape":[4,0],"data_offsets":[40,40]}}'
m=$tmp/model
mkdir -p "$m/1_Pooling" "$m/2_Normalize"
{
    le64 ${#hdr}
    printf '%s' "$hdr"
    printf '\000\000\000\077\000\000\200\277'                       # bias 0.5 -1
    printf '\000\000\200\077\000\000\000\077\000\000\200\277\000\000\000\100'   # 1 .5 -1 2
    printf '\000\000\000\100\000\000\200\077\000\000\000\077\000\000\200\277'   # 2 1 .5 -1
} >"$m/model.safetensors"
printf '{"torch_dtype": "float32"}' >"$m/config.json"
printf '{"pooling_mode_mean_tokens": true}' >"$m/1_Pooling/config.json"
printf '# a model\n' >"$m/README.md"
printf '{}' >"$m/tokenizer.json"
# x.npy: 3 x 4 float32
nh="{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"
while [ $(( (10 + ${#nh} + 1) % 64 )) -ne 0 ]; do nh="$nh "; done
{
    printf '\223NUMPY\001\000'
    printf "\\$(printf %03o $(( (${#nh} + 1) % 256 )))\\$(printf %03o $(( (${#nh} + 1) / 256 )))"
    printf '%s\n' "$nh"
    i=0
    while [ $i -lt 12 ]; do printf '\000\000\200\077'; i=$((i + 1)); done
} >"$tmp/x.npy"

q=$tmp/w8a8
$T "$SCALEDMM" quantize "$m/" "$q" 2>"$err"
rc=$?
expect 0 "wrote $q: 1 of 3 tensors quantized" "quantize summary"
[ "$(wc -l <"$err")" -eq 1 ] || { echo "FAIL: quantize printed more than one line"; fail=1; }
for f in 1_Pooling/config.json README.md tokenizer.json; do
    cmp -s "$m/$f" "$q/$f" || { echo "FAIL: quantize did not copy $f"; fail=1; }
done
[ -d "$q/2_Normalize" ] || { echo "FAIL: quantize did not copy 2_Normalize/"; fail=1; }
$T "$SCALEDMM" run "$q" --list >"$tmp/list" 2>"$err"
rc=$?
if [ $rc -ne 0 ] || [ "$(cat "$tmp/list")" != "$(printf 'dense\t2\t4\tw:channel a:token-sym')" ]; then
    echo "FAIL: run --list: exit $rc:"; cat "$tmp/list" "$err"; fail=1
else
    echo "ok: run --list: $(cat "$tmp/list")"
fi
for bias in model f32; do
    $T "$SCALEDMM" run "$q" --layer dense --input "$tmp/x.npy" --output "$tmp/y.npy" \
        --bias $bias 2>"$err"
    rc=$?
    expect 0 "layer dense: 3 x 4 F32 -> 3 x 2, bias float32, written to" "run --bias $bias"
done
"$SCALEDMM" run "$q" --layer dense --input "$tmp/x.npy" --output "$tmp/y.npy" --bias f64 \
    2>"$err"
rc=$?
expect 2 "not a mode" "run --bias f64"

# FIFOs and a directory where a file belongs
mkfifo "$tmp/fifo.npy"
$T "$SCALEDMM" run "$q" --layer dense --input "$tmp/fifo.npy" --output "$tmp/y.npy" 2>"$err"
rc=$?
expect 1 "fifo.npy: not a regular file" "run --input FIFO"
c=$tmp/c
mkdir "$c"
cp "$q/model.safetensors" "$c/"
mkfifo "$c/config.json"
$T "$SCALEDMM" run "$c" --list 2>"$err"
rc=$?
expect 1 "config.json: not a regular file" "config.json a FIFO"
$T "$SCALEDMM" quantize "$c" "$tmp/o1" 2>"$err"
rc=$?
expect 1 "config.json: not a regular file" "quantize: config.json a FIFO"
rm "$c/config.json"
mkdir "$c/config.json"
$T "$SCALEDMM" run "$c" --list 2>"$err"
rc=$?
expect 1 "config.json: not a regular file" "config.json a directory"
rmdir "$c/config.json"
cp "$q/config.json" "$c/"
rm "$c/model.safetensors"
mkfifo "$c/model.safetensors"
$T "$SCALEDMM" run "$c" --list 2>"$err"
rc=$?
expect 1 "model.safetensors: not a regular file" "model.safetensors a FIFO"
$T "$SCALEDMM" quantize "$tmp/x.npy" "$tmp/o2/" 2>"$err"
rc=$?
expect 1 "x.npy: not a directory" "quantize FILE DIR"
[ -e "$tmp/o2" ] && { echo "FAIL: quantize FILE DIR created the output"; fail=1; }
$T "$SCALEDMM" run "$tmp/nosuch/" --list 2>"$err"
rc=$?
expect 1 "nosuch/: No such file" "a missing checkpoint with a trailing slash"
grep -q '//' "$err" && { echo "FAIL: a double slash in: $(cat "$err")"; fail=1; }

# hostile patterns: refused quickly, as Python's re.match refuses them
for pat in 're:((((a{1,255}){1,255}){1,255}){1,255})' 're:zzz)|(mlp'; do
    sed "s/\"Linear\"/\"$pat\"/" "$q/config.json" >"$c/config.json"
    rm -f "$c/model.safetensors"
    cp "$q/model.safetensors" "$c/"
    $T "$SCALEDMM" run "$c" --list 2>"$err"
    rc=$?
    expect 1 "not a valid regular expression" "target $pat"
done

# an int8 layer that cannot run fails alone, with its name
hdr='{"a.weight":{"dtype":"I8","shape":[2,4],"data_offsets":[0,8]},"a.weight_scale":{"dtype":"F32","shape":[2,1],"data_offsets":[8,16]},"b.weight":{"dtype":"I8","shape":[4,0],"data_offsets":[16,16]}}'
{
    le64 ${#hdr}
    printf '%s' "$hdr"
    printf '\001\002\003\004\005\006\007\010'
    printf '\000\000\000\077\000\000\200\076'
} >"$c/model.safetensors"
cp "$q/config.json" "$c/config.json"
$T "$SCALEDMM" run "$c" --list >"$tmp/list" 2>"$err"
rc=$?
if [ $rc -ne 0 ] || ! grep -q "^b	unusable: tensor b.weight: I8 \[4, 0\]" "$tmp/list"; then
    echo "FAIL: run --list with an unusable layer: exit $rc:"; cat "$tmp/list" "$err"; fail=1
else
    echo "ok: run --list names the unusable layer: $(grep '^b' "$tmp/list")"
fi
$T "$SCALEDMM" run "$c" --layer b --input "$tmp/x.npy" --output "$tmp/y.npy" 2>"$err"
rc=$?
expect 1 "layer b cannot run: tensor b.weight: I8 \[4, 0\]" "run the unusable layer"
$T "$SCALEDMM" run "$c" --layer a --input "$tmp/x.npy" --output "$tmp/y.npy" 2>"$err"
rc=$?
expect 0 "layer a: 3 x 4 F32 -> 3 x 2" "run the usable layer beside it"
# accuracy measures the usable layer, reports the other and exits 1
r=$tmp/ref
mkdir "$r"
hdr='{"a.weight":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}}'
{
    le64 ${#hdr}
    printf '%s' "$hdr"
    printf '\000\000\200\077\000\000\000\100\000\000\100\100\000\000\200\100'   # 1 2 3 4
    printf '\000\000\240\100\000\000\300\100\000\000\340\100\000\000\000\101'   # 5 6 7 8
} >"$r/model.safetensors"
$T "$SCALEDMM" accuracy "$c" --reference "$r" --m 4 --threads 1 --format csv >"$tmp/acc" 2>"$err"
rc=$?
expect 1 "layer b skipped, it cannot run: tensor b.weight" "accuracy with an unusable layer"
grep -q '^a,' "$tmp/acc" || { echo "FAIL: accuracy did not measure layer a:"; cat "$tmp/acc"; fail=1; }
$T "$SCALEDMM" accuracy "$c" --reference "$r" --layer b 2>"$err"
rc=$?
expect 1 "layer b cannot run: tensor b.weight" "accuracy --layer UNUSABLE"
"$SCALEDMM" accuracy "$c" --reference "$r" --bias half 2>"$err"
rc=$?
expect 2 "not a mode" "accuracy --bias half"
"$SCALEDMM" quantize --match gptq "$m" "$tmp/o3" 2>"$err"
rc=$?
expect 2 "not a mode" "quantize --match gptq"
"$SCALEDMM" run "$q" --list --layer dense 2>"$err"
rc=$?
expect 2 "takes no --layer" "run --list --layer"
exit $fail
