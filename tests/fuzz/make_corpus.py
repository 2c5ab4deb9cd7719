#!/usr/bin/env python3
# Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/{safetensors,idx}/): valid files,
# near misses one defect away from valid, and reproducers of fixed bugs (regress_*). Independent
# of mixprec's own writers (plain struct/json/gzip), deterministic (gzip mtime 0), each file under
# 4 KB. The bytes are committed; rerun only to change them: python3 tests/fuzz/make_corpus.py
# Not here: inputs the fuzzer finds (scripts/fuzz.sh keeps those in scratch copies).
import gzip
import json
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ST = os.path.join(HERE, "corpus", "safetensors")
IDX = os.path.join(HERE, "corpus", "idx")


def put(folder, name, data):
    assert len(data) < 4096, (name, len(data))
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------------ safetensors
DT = {"F32": ("<f", 4), "F64": ("<d", 8), "F16": ("<e", 2), "BF16": (None, 2),
      "I32": ("<i", 4), "I64": ("<q", 8), "U8": ("<B", 1), "BOOL": ("<?", 1)}


def pack(dtype, values):
    fmt, _ = DT[dtype]
    if dtype == "BF16":  # truncated f32 is exact for the small values used here
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return b"".join(struct.pack(fmt, v) for v in values)


def st_file(tensors, metadata=None, header_override=None, pad=True):
    """tensors: list of (name, dtype, shape, raw bytes); offsets assigned in order."""
    header, blob = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = header_override if header_override is not None else json.dumps(header).encode()
    if pad:
        while (8 + len(h)) % 8:
            h += b" "
    return struct.pack("<Q", len(h)) + h + blob


def seeds_safetensors():
    w = pack("F32", [0.5, -1.25, 2.0, 3.5, -0.0, 1e-3])
    b = pack("BF16", [1.0, -2.0, 0.5, 4.0])
    put(ST, "valid_two_tensors.safetensors",
        st_file([("layer.weight", "F32", [2, 3], w), ("layer.bias", "BF16", [4], b)],
                metadata={"format": "pt", "mixprec": "0.1.0"}))
    put(ST, "valid_all_dtypes.safetensors", st_file([
        ("f32", "F32", [2], pack("F32", [1.0, 2.0])),
        ("f64", "F64", [2], pack("F64", [1.0, -3.0])),
        ("f16", "F16", [2, 1], pack("F16", [0.5, 65504.0])),
        ("bf16", "BF16", [1, 2], pack("BF16", [1.0, 3.0])),
        ("i32", "I32", [3], pack("I32", [1, -2, 3])),
        ("i64", "I64", [1], pack("I64", [-(2 ** 40)])),
        ("u8", "U8", [4], bytes([0, 1, 254, 255])),
        ("bool", "BOOL", [2], bytes([0, 1])),
    ]))
    put(ST, "valid_empty_and_scalar.safetensors", st_file([
        ("empty", "F32", [0, 3], b""), ("scalar", "F64", [], pack("F64", [math.pi])),
        ("zero_dim", "I64", [4, 0, 2], b"")]))
    put(ST, "valid_nonfinite.safetensors",
        st_file([("x", "F32", [4], pack("F32", [math.nan, math.inf, -math.inf, 1.0])),
                 ("h", "F16", [2], pack("F16", [math.inf, 0.0]))]))
    put(ST, "valid_no_tensors.safetensors", st_file([], metadata={}))
    put(ST, "valid_unpadded.safetensors", st_file([("v", "U8", [3], b"abc")], pad=False))
    # Offsets out of file order: the reader returns tensors sorted by offset.
    hdr = json.dumps({"b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},
                      "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}).encode()
    put(ST, "valid_reordered.safetensors", struct.pack("<Q", len(hdr)) + hdr + b"wxyz")

    # Near misses.
    put(ST, "bad_short.safetensors", b"\x10\x00\x00")
    good = st_file([("t", "F32", [2], pack("F32", [1.0, 2.0]))])
    put(ST, "bad_header_len_too_big.safetensors", struct.pack("<Q", 4000) + good[8:])
    put(ST, "bad_header_len_huge.safetensors", b"\xff" * 8 + good[8:])
    put(ST, "bad_truncated_data.safetensors", good[:-3])
    put(ST, "bad_json.safetensors", st_file([], header_override=b'{"t": {"dtype": "F32", '))
    put(ST, "bad_header_array.safetensors", st_file([], header_override=b"[1, 2, 3]"))
    put(ST, "bad_dtype.safetensors", st_file([("t", "F8_E4M3", [2], b"\x01\x02")]))
    put(ST, "bad_shape_negative.safetensors", st_file([], header_override=json.dumps(
        {"t": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}).encode()) + b"x")
    put(ST, "bad_shape_huge.safetensors", st_file([], header_override=json.dumps(
        {"t": {"dtype": "F32", "shape": [2 ** 40, 2 ** 40], "data_offsets": [0, 4]}}).encode())
        + b"abcd")
    put(ST, "bad_offsets_mismatch.safetensors", st_file([], header_override=json.dumps(
        {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}).encode()) + b"abcdefgh")
    put(ST, "bad_offsets_reversed.safetensors", st_file([], header_override=json.dumps(
        {"t": {"dtype": "U8", "shape": [0], "data_offsets": [4, 2]}}).encode()) + b"abcd")
    put(ST, "bad_offsets_overlap.safetensors", st_file([], header_override=json.dumps(
        {"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
         "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}}).encode()) + b"abcd")
    put(ST, "bad_offsets_three.safetensors", st_file([], header_override=json.dumps(
        {"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]}}).encode()) + b"ab")
    put(ST, "bad_metadata_value.safetensors", st_file([], metadata={"epoch": 3}))
    put(ST, "bad_metadata_array.safetensors", st_file([], header_override=json.dumps(
        {"__metadata__": ["a"]}).encode()))
    put(ST, "bad_entry_not_object.safetensors", st_file([], header_override=b'{"t": 5}'))
    put(ST, "bad_missing_shape.safetensors", st_file([], header_override=json.dumps(
        {"t": {"dtype": "U8", "data_offsets": [0, 1]}}).encode()) + b"x")
    # Reproducer (fixed): a 0 dim let the other dims reach 2^120 elements of extent, and the
    # contiguous strides of that shape overflowed int64 (UBSan) before the size checks.
    put(ST, "regress_zero_dim_stride_overflow.safetensors", st_file([], header_override=json.dumps(
        {"t": {"dtype": "F32", "shape": [0, 2 ** 40, 2 ** 40, 2 ** 40], "data_offsets": [0, 0]}}
        ).encode()))
    put(ST, "bad_float_dim.safetensors", st_file([], header_override=json.dumps(
        {"t": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}}).encode()) + b"x")
    # Repeated keys (a JSON parser would keep the last): a tensor name, a field, a metadata key.
    put(ST, "bad_duplicate_tensor.safetensors", st_file([], header_override=(
        b'{"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
        b'"t": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}')) + b"ab")
    put(ST, "bad_duplicate_field.safetensors", st_file([], header_override=(
        b'{"t": {"dtype": "U8", "dtype": "I32", "shape": [1], "data_offsets": [0, 1]}}')) + b"a")
    put(ST, "bad_duplicate_metadata.safetensors", st_file([], header_override=(
        b'{"__metadata__": {"global_step": "5", "global_step": "-5"}}')))
    # Foreign files: each must be "not a safetensors file", not a header-length number.
    put(ST, "foreign_text.safetensors", b"epoch 1: loss 0.5\nepoch 2: loss 0.4\n")
    put(ST, "foreign_png.safetensors", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(17))
    put(ST, "foreign_idx.safetensors", idx_file([4], bytes([1, 2, 3, 4])))
    put(ST, "foreign_json.safetensors", json.dumps({"model": "lenet", "steps": 10}).encode())


# ------------------------------------------------------------------ idx
def idx_file(dims, data, type_byte=0x08, ndim=None):
    ndim = len(dims) if ndim is None else ndim
    return bytes([0, 0, type_byte, ndim]) + b"".join(struct.pack(">I", d) for d in dims) + data


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def seeds_idx():
    labels = idx_file([10], bytes([3, 1, 4, 1, 5, 9, 2, 6, 5, 3]))
    images = idx_file([3, 4, 4], bytes((i * 37) % 256 for i in range(48)))
    put(IDX, "valid_labels.idx1", labels)
    put(IDX, "valid_images.idx3", images)
    put(IDX, "valid_labels.idx1.gz", gz(labels))
    put(IDX, "valid_images.idx3.gz", gz(images))
    put(IDX, "valid_two_members.idx3.gz", gz(images[:20]) + gz(images[20:]))
    put(IDX, "valid_8_dims.idx8", idx_file([1, 2, 1, 2, 1, 2, 1, 2], bytes(range(16))))
    put(IDX, "valid_stored_block.idx1.gz", gzip.compress(labels, compresslevel=0, mtime=0))

    # Near misses.
    put(IDX, "bad_empty.idx1", b"")
    put(IDX, "bad_short_magic.idx1", b"\x00\x00\x08")
    put(IDX, "bad_truncated_header.idx3", images[:9])
    put(IDX, "bad_truncated_payload.idx3", images[:-1])
    put(IDX, "bad_trailing_byte.idx1", labels + b"\x00")
    put(IDX, "bad_type_float.idx1", idx_file([1], b"\x00\x00\x80\x3f", type_byte=0x0D))
    put(IDX, "bad_zero_dim.idx3", idx_file([3, 0, 4], b""))
    put(IDX, "bad_huge_dims.idx3", idx_file([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], b"\x00" * 8))
    put(IDX, "bad_big_payload.idx3", idx_file([60000, 28, 28], b"\x00" * 16))
    put(IDX, "bad_html.idx3", b"<!DOCTYPE html><html><body>Not Found</body></html>\n")
    put(IDX, "bad_gz_truncated.idx3.gz", gz(images)[:-12])
    put(IDX, "bad_gz_crc.idx1.gz", gz(labels)[:-8] + b"\xde\xad\xbe\xef" + gz(labels)[-4:])
    put(IDX, "bad_gz_trailing_garbage.idx1.gz", gz(labels) + b"junk")
    put(IDX, "bad_gz_big_payload.idx3.gz", gz(idx_file([1000, 28, 28], b"\x00" * 4000)))
    put(IDX, "bad_gz_trailing_data.idx1.gz", gz(labels + b"\x07\x07"))


if __name__ == "__main__":
    os.makedirs(ST, exist_ok=True)
    os.makedirs(IDX, exist_ok=True)
    seeds_safetensors()
    seeds_idx()
