#!/usr/bin/env python3
"""Generates the safetensors / index / .npy test corpus in tests/data.

    python3 tests/data/make_corpus.py      # rewrites tests/data/{valid,malformed}

Standard library only; the output is deterministic, and committed.

valid/MANIFEST     one line per tensor of the valid files:
                   path, kind (st | npy | checkpoint), tensor name, dtype,
                   shape (comma-separated, "" for a scalar), data bytes in hex;
                   "-" fields for a file without tensors.
malformed/MANIFEST one line per malformed file: path, kind (st | index | npy),
                   the tensor the error must name ("-" for none), and a phrase
                   the error must contain.
corpus.am          the list of files for tests/Makefile.am (EXTRA_DIST).

Fields are separated by tabs.
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "I32": 4, "U8": 1,
              "I16": 2, "I64": 8, "F64": 8, "BOOL": 1}
NPY_DESCR = {"<f4": "F32", "<f2": "F16", "|i1": "I8", "<i1": "I8", "<i4": "I32"}


def pattern(n, seed):
    """n deterministic bytes."""
    return bytes((i * 37 + seed * 11 + 5) & 0xFF for i in range(n))


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def st_image(header, data=b"", length=None, pad=True):
    """A safetensors image from a header (str or bytes) and a data area."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header += b" " * (-len(header) % 8)
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def st_valid(tensors, metadata=None):
    """Like the reference writer: widest type first, packed, header padded."""
    order = sorted(range(len(tensors)),
                   key=lambda i: (-DTYPE_SIZE[tensors[i][1]], tensors[i][0]))
    hdr, data, offs = {}, b"", {}
    for i in order:
        name, dtype, shape, payload = tensors[i]
        offs[i] = (len(data), len(data) + len(payload))
        data += payload
    if metadata is not None:
        hdr["__metadata__"] = metadata
    for i, (name, dtype, shape, payload) in enumerate(tensors):
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": list(offs[i])}
    return st_image(json.dumps(hdr, separators=(",", ":")), data)


def npy_image(descr, shape, data, fortran="False", version=(1, 0), dict_text=None,
              newline=True, length=None):
    if dict_text is None:
        if len(shape) == 1:
            s = "(%d,)" % shape[0]
        else:
            s = "(" + ", ".join(str(d) for d in shape) + ")"
        dict_text = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, s)
    prefix = 10 if version[0] == 1 else 12
    text = dict_text.encode("latin-1")
    total = prefix + len(text) + 1
    text += b" " * (-total % 64) + (b"\n" if newline else b" ")
    n = len(text) if length is None else length
    head = b"\x93NUMPY" + bytes(version)
    head += struct.pack("<H", n) if prefix == 10 else struct.pack("<I", n)
    return head + text + data


def one(dtype, shape, offsets, name="w", extra=""):
    return '{"%s":{"dtype":%s,"shape":%s,"data_offsets":%s%s}}' % (
        name, dtype, shape, offsets, extra)


def main():
    valid_dir = os.path.join(HERE, "valid")
    bad_dir = os.path.join(HERE, "malformed")
    for d in (valid_dir, bad_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    files = []
    vman, bman = [], []

    def put(directory, rel, blob):
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(blob)
        files.append(os.path.relpath(path, HERE))

    def manifest_tensor(rel, kind, name, dtype, shape, payload):
        vman.append("\t".join([rel, kind, name, dtype, ",".join(str(d) for d in shape),
                               payload.hex()]))

    # ---------------- valid safetensors ----------------
    def valid_st(rel, tensors, metadata=None, kind="st"):
        put(valid_dir, rel, st_valid(tensors, metadata))
        for name, dtype, shape, payload in tensors:
            manifest_tensor(rel, kind, name, dtype, shape, payload)

    def t(name, dtype, shape, seed):
        return (name, dtype, shape, pattern(count(shape) * DTYPE_SIZE[dtype], seed))

    valid_st("single_f32.safetensors", [t("weight", "F32", [2, 3], 1)], {"format": "pt"})
    valid_st("mixed.safetensors", [
        t("layer.0.weight", "I8", [3, 5], 2),
        t("layer.0.weight_scale", "F32", [3, 1], 3),
        t("layer.0.bias", "BF16", [3], 4),
        t("half", "F16", [2, 2], 5),
        t("ints", "I32", [4], 6),
        t("bytes", "U8", [3], 7),
        t("shorts", "I16", [1, 3], 8),
        t("longs", "I64", [2], 9),
        t("doubles", "F64", [1], 10),
        t("mask", "BOOL", [5], 11),
        t("scalar", "F32", [], 12),
        t("empty", "F32", [0, 4], 13),
    ], {"format": "pt", "quantization": "none"})
    put(valid_dir, "empty.safetensors", st_image("{}"))
    vman.append("\t".join(["empty.safetensors", "st", "-", "-", "-", "-"]))

    # A sharded checkpoint.
    shards = {
        "model-00001-of-00002.safetensors": [t("embed.weight", "F16", [4, 2], 20),
                                             t("layer.0.weight", "I8", [2, 4], 21)],
        "model-00002-of-00002.safetensors": [t("layer.0.weight_scale", "F32", [2, 1], 22),
                                             t("lm_head.weight", "BF16", [3, 2], 23)],
    }
    weight_map = {}
    for shard, tensors in shards.items():
        put(valid_dir, "sharded/" + shard, st_valid(tensors))
        for name, dtype, shape, payload in tensors:
            weight_map[name] = shard
            manifest_tensor("sharded", "checkpoint", name, dtype, shape, payload)
    index = {"metadata": {"total_size": 64}, "weight_map": weight_map}
    put(valid_dir, "sharded/model.safetensors.index.json",
        (json.dumps(index, indent=2) + "\n").encode())

    # ---------------- valid .npy ----------------
    def valid_npy(rel, descr, shape, seed, **kw):
        dtype = NPY_DESCR[descr]
        payload = pattern(count(shape) * DTYPE_SIZE[dtype], seed)
        put(valid_dir, rel, npy_image(descr, shape, payload, **kw))
        manifest_tensor(rel, "npy", "-", dtype, shape, payload)

    valid_npy("f4_2x3.npy", "<f4", [2, 3], 30)
    valid_npy("f2_5.npy", "<f2", [5], 31)
    valid_npy("i1_3x2.npy", "|i1", [3, 2], 32)
    valid_npy("i1_le.npy", "<i1", [4], 33)
    valid_npy("i4_2x2x2.npy", "<i4", [2, 2, 2], 34)
    valid_npy("f4_scalar.npy", "<f4", [], 35)
    valid_npy("f4_0x3.npy", "<f4", [0, 3], 36)
    valid_npy("f4_v2.npy", "<f4", [3], 37, version=(2, 0))
    valid_npy("f4_v3.npy", "<f4", [2], 38, version=(3, 0))
    # numpy >= 1.24 style: no trailing comma, double quotes, extra padding.
    valid_npy("f4_style.npy", "<f4", [2, 2], 39,
              dict_text='{"descr": "<f4", "fortran_order": False, "shape": (2, 2)}' + " " * 24)

    # ---------------- malformed safetensors ----------------
    def bad(rel, kind, tensor, phrase, blob):
        put(bad_dir, rel, blob)
        bman.append("\t".join([rel, kind, tensor, phrase]))

    f32_24 = pattern(24, 40)
    good = one('"F32"', "[2,3]", "[0,24]")
    bad("empty.safetensors", "st", "-", "too short", b"")
    bad("truncated_length.safetensors", "st", "-", "too short", b"\x10\x00\x00\x00\x00")
    bad("header_beyond_file.safetensors", "st", "-", "beyond the end",
        st_image("{}", length=1000))
    bad("header_over_limit.safetensors", "st", "-", "exceeds the limit",
        st_image("{}", length=1 << 63))
    bad("not_json.safetensors", "st", "-", "not valid JSON", st_image("{nope"))
    bad("json_array.safetensors", "st", "-", "not a JSON object", st_image("[1,2]"))
    bad("json_number.safetensors", "st", "-", "not valid JSON", st_image("42"))
    bad("trailing_garbage.safetensors", "st", "-", "not valid JSON", st_image("{} x"))
    bad("nul_padding.safetensors", "st", "-", "not valid JSON",
        st_image(b"{}\0\0\0\0\0\0", pad=False))
    bad("invalid_utf8.safetensors", "st", "-", "not valid JSON",
        st_image(one('"F32"', "[2,3]", "[0,24]", name="w\xff").encode("latin-1"), f32_24))
    bad("unknown_dtype.safetensors", "st", "w", "unknown dtype",
        st_image(one('"F8_E4M3"', "[2,3]", "[0,6]"), pattern(6, 1)))
    bad("dtype_not_string.safetensors", "st", "w", "dtype is not a string",
        st_image(one("4", "[2,3]", "[0,24]"), f32_24))
    bad("missing_dtype.safetensors", "st", "w", "missing dtype",
        st_image('{"w":{"shape":[2,3],"data_offsets":[0,24]}}', f32_24))
    bad("missing_offsets.safetensors", "st", "w", "missing data_offsets",
        st_image('{"w":{"dtype":"F32","shape":[2,3]}}', f32_24))
    bad("entry_not_object.safetensors", "st", "w", "not a JSON object",
        st_image('{"w":[1,2]}'))
    bad("extra_key.safetensors", "st", "w", "unknown key",
        st_image(one('"F32"', "[2,3]", "[0,24]", extra=',"strides":[3,1]'), f32_24))
    bad("negative_shape.safetensors", "st", "w", "not a non-negative integer",
        st_image(one('"F32"', "[-2,3]", "[0,24]"), f32_24))
    bad("shape_not_array.safetensors", "st", "w", "shape is not an array",
        st_image(one('"F32"', '"2x3"', "[0,24]"), f32_24))
    bad("shape_float.safetensors", "st", "w", "not a non-negative integer",
        st_image(one('"F32"', "[2.0,3]", "[0,24]"), f32_24))
    bad("too_many_dims.safetensors", "st", "w", "dimensions",
        st_image(one('"F32"', "[1,1,1,1,1,1,1,1,1]", "[0,4]"), pattern(4, 2)))
    bad("shape_bytes_mismatch.safetensors", "st", "w", "data_offsets give",
        st_image(one('"F32"', "[2,3]", "[0,20]"), f32_24))
    bad("zero_dim_nonempty.safetensors", "st", "w", "data_offsets give",
        st_image(one('"F32"', "[0,4]", "[0,16]"), pattern(16, 3)))
    bad("offsets_out_of_range.safetensors", "st", "w", "beyond the data area",
        st_image(good, f32_24[:16]))
    bad("begin_gt_end.safetensors", "st", "w", "begin",
        st_image(one('"F32"', "[1]", "[8,4]"), f32_24))
    bad("offsets_three.safetensors", "st", "w", "[begin, end]",
        st_image(one('"F32"', "[1]", "[0,4,8]"), f32_24))
    bad("offsets_negative.safetensors", "st", "w", "[begin, end]",
        st_image(one('"F32"', "[1]", "[-4,0]"), f32_24))
    bad("offsets_float.safetensors", "st", "w", "[begin, end]",
        st_image(one('"F32"', "[1]", "[0.0,4.0]"), f32_24))
    bad("offsets_not_array.safetensors", "st", "w", "[begin, end]",
        st_image(one('"F32"', "[1]", "{}"), f32_24))
    bad("huge_integer.safetensors", "st", "-", "not valid JSON",
        st_image(one('"F32"', "[1]", "[0,100000000000000000000000000000]"), f32_24))
    bad("overlap.safetensors", "st", "b", "overlaps",
        st_image('{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
                 '"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}', f32_24))
    bad("overlap_contained.safetensors", "st", "inner", "overlaps",
        st_image('{"outer":{"dtype":"F32","shape":[6],"data_offsets":[0,24]},'
                 '"inner":{"dtype":"I8","shape":[4],"data_offsets":[4,8]}}', f32_24))
    bad("duplicate_names.safetensors", "st", "w", "duplicate",
        st_image('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                 '"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', f32_24[:16]))
    bad("duplicate_metadata.safetensors", "st", "-", "duplicate",
        st_image('{"__metadata__":{},"__metadata__":{}}'))
    bad("metadata_not_strings.safetensors", "st", "-", "is not a string",
        st_image('{"__metadata__":{"format":"pt","layers":12}}'))
    bad("metadata_not_object.safetensors", "st", "-", "__metadata__ is not a JSON object",
        st_image('{"__metadata__":"pt"}'))
    bad("shape_count_overflow.safetensors", "st", "w", "overflows",
        st_image(one('"F32"', "[4611686018427387904,4611686018427387904]", "[0,0]")))
    bad("shape_bytes_overflow.safetensors", "st", "w", "overflows",
        st_image(one('"F32"', "[4611686018427387904]", "[0,0]")))
    bad("shape_overflow_with_zero.safetensors", "st", "w", "overflows",
        st_image(one('"F32"', "[0,4611686018427387904,4611686018427387904]", "[0,0]")))

    # ---------------- malformed indexes ----------------
    def bad_index(rel, tensor, phrase, text):
        bad(rel, "index", tensor, phrase, text.encode("utf-8"))

    shard = "model-00001-of-00001.safetensors"
    bad_index("not_json.index.json", "-", "not valid JSON", '{"weight_map": {')
    bad_index("array.index.json", "-", "not a JSON object", '[{"weight_map": {}}]')
    bad_index("no_weight_map.index.json", "-", 'no "weight_map"', '{"metadata": {}}')
    bad_index("weight_map_array.index.json", "-", '"weight_map" is not a JSON object',
              '{"weight_map": ["a"]}')
    bad_index("weight_map_empty.index.json", "-", "is empty", '{"weight_map": {}}')
    bad_index("value_not_string.index.json", "w", "not a string",
              '{"weight_map": {"w": 1}}')
    bad_index("slash.index.json", "w", "not a plain file name",
              '{"weight_map": {"w": "sub/%s"}}' % shard)
    bad_index("dotdot.index.json", "w", "not a plain file name",
              '{"weight_map": {"w": "../%s"}}' % shard)
    bad_index("dotdot_only.index.json", "w", "not a plain file name",
              '{"weight_map": {"w": ".."}}')
    bad_index("absolute.index.json", "w", "not a plain file name",
              '{"weight_map": {"w": "/etc/passwd"}}')
    bad_index("backslash.index.json", "w", "not a plain file name",
              '{"weight_map": {"w": "..\\\\x.safetensors"}}')
    bad_index("empty_shard_name.index.json", "w", "not a plain file name",
              '{"weight_map": {"w": ""}}')
    bad_index("duplicate.index.json", "w", "duplicate",
              '{"weight_map": {"w": "%s", "w": "%s"}}' % (shard, shard))
    bad_index("metadata_not_object.index.json", "-", '"metadata" is not a JSON object',
              '{"metadata": 3, "weight_map": {"w": "%s"}}' % shard)

    # ---------------- malformed .npy ----------------
    f4_6 = pattern(24, 50)
    bad("bad_magic.npy", "npy", "-", "not a .npy file",
        b"\x93NUMPZ" + npy_image("<f4", [2, 3], f4_6)[6:])
    bad("truncated_prefix.npy", "npy", "-", "not a .npy file", b"\x93NUMPY\x01")
    bad("version_4.npy", "npy", "-", "unsupported .npy version 4.0",
        npy_image("<f4", [2, 3], f4_6, version=(4, 0)))
    bad("version_1_1.npy", "npy", "-", "unsupported .npy version 1.1",
        npy_image("<f4", [2, 3], f4_6, version=(1, 1)))
    bad("header_beyond_file.npy", "npy", "-", "beyond the end",
        npy_image("<f4", [2, 3], b"", length=4000))
    bad("big_endian.npy", "npy", "-", "big-endian", npy_image(">f4", [2, 3], f4_6))
    bad("object.npy", "npy", "-", "object arrays", npy_image("|O", [2], pattern(16, 1)))
    bad("float64.npy", "npy", "-", "unsupported descr", npy_image("<f8", [3], f4_6))
    bad("structured.npy", "npy", "-", "structured",
        npy_image(None, None, f4_6, dict_text="{'descr': [('a', '<f4')], "
                  "'fortran_order': False, 'shape': (6,), }"))
    bad("fortran_order.npy", "npy", "-", "fortran_order True",
        npy_image("<f4", [2, 3], f4_6, fortran="True"))
    bad("fortran_order_int.npy", "npy", "-", "not True or False",
        npy_image("<f4", [2, 3], f4_6, fortran="0"))
    bad("too_short.npy", "npy", "-", "too short", npy_image("<f4", [2, 3], f4_6[:20]))
    bad("too_long.npy", "npy", "-", "too long", npy_image("<f4", [2, 3], f4_6 + b"\0"))
    bad("no_newline.npy", "npy", "-", "newline",
        npy_image("<f4", [2, 3], f4_6, newline=False))
    bad("missing_shape.npy", "npy", "-", "missing key 'shape'",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4', 'fortran_order': False}"))
    bad("extra_key.npy", "npy", "-", "unknown key",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4', 'fortran_order': False, "
                  "'shape': (6,), 'align': 8}"))
    bad("duplicate_key.npy", "npy", "-", "duplicate key",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4', 'descr': '<f4', "
                  "'fortran_order': False, 'shape': (6,)}"))
    bad("negative_shape.npy", "npy", "-", "negative",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4', 'fortran_order': False, "
                  "'shape': (-2, -3)}"))
    bad("shape_count_overflow.npy", "npy", "-", "overflows",
        npy_image("<f4", [1 << 62, 1 << 62], b""))
    bad("shape_bytes_overflow.npy", "npy", "-", "overflows",
        npy_image("<f4", [1 << 62], b""))
    bad("dim_overflow.npy", "npy", "-", "overflows",
        npy_image("<f4", [10 ** 20], b""))
    bad("shape_int.npy", "npy", "-", "not a tuple",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4', 'fortran_order': False, "
                  "'shape': (6)}"))
    bad("shape_list.npy", "npy", "-", "not a tuple",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4', 'fortran_order': False, "
                  "'shape': [6]}"))
    bad("shape_long_suffix.npy", "npy", "-", "not a tuple of integers",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4', 'fortran_order': False, "
                  "'shape': (6L,)}"))
    bad("too_many_dims.npy", "npy", "-", "more dimensions",
        npy_image("<f4", [1] * 9, pattern(4, 2)))
    bad("unterminated_string.npy", "npy", "-", "'descr' is not a string",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4"))
    bad("text_after_dict.npy", "npy", "-", "unexpected text",
        npy_image(None, None, f4_6, dict_text="{'descr': '<f4', 'fortran_order': False, "
                  "'shape': (6,)} x"))
    bad("not_a_dict.npy", "npy", "-", "not a dict",
        npy_image(None, None, f4_6, dict_text="['descr', '<f4']"))

    with open(os.path.join(valid_dir, "MANIFEST"), "w") as f:
        f.write("\n".join(vman) + "\n")
    with open(os.path.join(bad_dir, "MANIFEST"), "w") as f:
        f.write("\n".join(bman) + "\n")
    files += ["valid/MANIFEST", "malformed/MANIFEST"]
    with open(os.path.join(HERE, "corpus.am"), "w") as f:
        f.write("# Generated by data/make_corpus.py: the test corpus, for EXTRA_DIST.\n")
        f.write("CORPUS_FILES = \\\n\tdata/make_corpus.py")
        for rel in sorted(files):
            f.write(" \\\n\tdata/" + rel)
        f.write("\n")


if __name__ == "__main__":
    main()
