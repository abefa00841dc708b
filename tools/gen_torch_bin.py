#!/usr/bin/python3
"""Generates tests/testdata/torch_bin/: PyTorch checkpoints (pytorch_model.bin) for tests/io/weights_test.cc.

    /usr/bin/python3 tools/gen_torch_bin.py ../shared/fixtures/roformer-hf tests/testdata/torch_bin

Needs Debian's python3-torch (PyTorch 1.13) and numpy. Deterministic (fixed seeds, fixed zip times)
except the legacy-format files, whose storage keys PyTorch takes from memory addresses.
Outputs, all small (< 1 MB together):
  case1_mlm_basic.bin              the fixture's model.safetensors through torch.save, plus the tied
                                   decoder weight/bias as HF's pytorch_model.bin has them (shared storages)
                                   and the state dict's _metadata (pickled with BUILD)
  case2_embproj_rotary_value.bin   the same with non-contiguous tensors: a transposed weight, a
                                   transposed-then-sliced view with a storage offset, q/k/v biases as
                                   slices of one shared storage, an nn.Parameter
  case3_seq_eq_max_positions.bin   legacy LayerNorm names (gamma/beta), re-zipped with deflate
  dtypes.bin, dtypes_legacy.bin    F32/F16/BF16/I64/F64, special values, strides 0, 0-dim, empty, shared
                                   storages, in a plain dict; zip and legacy (pre-1.6 format,
                                   _use_new_zipfile_serialization=False)
  dtypes.safetensors               what dtypes.bin holds, contiguous, plus <name>.as_f32 = tensor.float()
  bad_*.bin                        malicious and malformed files that the reader must reject
"""
import collections
import io
import json
import os
import pickle
import struct
import sys
import zipfile

import numpy as np
import torch

ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
             "I64": torch.int64}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}
ZIP_TIME = (2024, 1, 1, 0, 0, 0)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = collections.OrderedDict()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + e])
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.zeros(0, dtype=torch.uint8)
        out[name] = t.view(ST_DTYPES[info["dtype"]]).reshape(info["shape"]).clone()
    return out


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def save(obj, path, **kw):
    torch.save(obj, path, **kw)
    torch.load(path)  # PyTorch itself must accept every good file


def rezip_deflated(path):
    with zipfile.ZipFile(path) as z:
        members = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members:
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)


def write_zip(path, members, prefix="archive/"):
    """A torch.save-style archive from {member: bytes} (stored, fixed times)."""
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(prefix + name, ZIP_TIME), data)


class FakeStorage:
    """Stands for a storage: pickled as the persistent id torch.save writes, which may lie."""

    def __init__(self, key, numel, storage_type=torch.FloatStorage):
        self.pid = ("storage", storage_type, key, "cpu", numel)


class FakeTensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class FakePickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, FakeStorage) else None


def fake_pickle(obj, protocol=2):
    buf = io.BytesIO()
    FakePickler(buf, protocol=protocol).dump(obj)
    return buf.getvalue()


class Evil:
    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


def hf_metadata():
    return collections.OrderedDict([("", {"version": 1}), ("roformer", {"version": 1}),
                                    ("roformer.embeddings.LayerNorm", {"version": 1})])


def fixture_bins(fixtures, out):
    c1 = read_safetensors(os.path.join(fixtures, "case1_mlm_basic/model.safetensors"))
    sd = collections.OrderedDict(c1)
    sd["cls.predictions.decoder.weight"] = sd["roformer.embeddings.word_embeddings.weight"]  # tied: one storage
    sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"]
    sd._metadata = hf_metadata()  # as module.state_dict() has it: pickled as BUILD of the OrderedDict
    save(sd, os.path.join(out, "case1_mlm_basic.bin"))

    c2 = read_safetensors(os.path.join(fixtures, "case2_embproj_rotary_value/model.safetensors"))
    sd = collections.OrderedDict(c2)
    pre = "roformer.encoder.layer.0.attention."
    sd[pre + "self.query.weight"] = c2[pre + "self.query.weight"].t().contiguous().t()  # transposed
    w = c2[pre + "output.dense.weight"]  # [64, 64]: transposed into a bigger buffer, then sliced
    buf = torch.zeros(w.shape[1] + 3, w.shape[0] + 5)
    buf[2:2 + w.shape[1], 1:1 + w.shape[0]] = w.t()
    sd[pre + "output.dense.weight"] = buf[2:2 + w.shape[1], 1:1 + w.shape[0]].t()
    qkv = torch.cat([c2[pre + "self." + p + ".bias"] for p in ("query", "key", "value")])  # one storage
    for i, p in enumerate(("query", "key", "value")):
        sd[pre + "self." + p + ".bias"] = qkv[i * 64:(i + 1) * 64]
    sd["roformer.embeddings_project.weight"] = torch.nn.Parameter(c2["roformer.embeddings_project.weight"])
    assert not sd[pre + "output.dense.weight"].is_contiguous()
    assert sd[pre + "output.dense.weight"].storage_offset() > 0
    for k in c2:
        assert torch.equal(sd[k], c2[k]), k
    sd._metadata = hf_metadata()
    save(sd, os.path.join(out, "case2_embproj_rotary_value.bin"))

    c3 = read_safetensors(os.path.join(fixtures, "case3_seq_eq_max_positions/model.safetensors"))
    sd = collections.OrderedDict()
    for k, v in c3.items():
        if "LayerNorm" in k:
            k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        sd[k] = v
    path = os.path.join(out, "case3_seq_eq_max_positions.bin")
    save(sd, path)
    rezip_deflated(path)
    torch.load(path)


def dtype_bins(out):
    torch.manual_seed(7)
    special = [0.0, -0.0, 1.0, -2.5, 65504.0, 6.103515625e-05, 5.960464477539063e-08, 1e-6, 3.0e38,
               float("inf"), float("-inf"), float("nan")]
    f16 = torch.cat([torch.tensor(special).half(), torch.randn(20).half()])
    bf16 = torch.cat([torch.tensor(special).bfloat16(), torch.randn(20).bfloat16()])
    base = torch.randn(5, 6)
    sd = {}  # a plain dict this time (EMPTY_DICT rather than OrderedDict)
    sd["f32"] = torch.randn(3, 4)
    sd["f32_transposed"] = base.t()
    sd["f32_rows"] = base[1:4]  # shares base's storage, offset 6
    sd["f16"] = f16
    sd["f16_strided"] = f16[3:21:2]
    sd["bf16"] = bf16
    sd["bf16_matrix_t"] = bf16[:32].reshape(4, 8).t()
    sd["i64"] = torch.tensor([0, -1, 2**40, -(2**62), 2**63 - 1], dtype=torch.int64)
    sd["f64"] = torch.randn(2, 3, dtype=torch.float64)
    sd["expanded"] = torch.arange(3.0).expand(4, 3)  # stride 0
    sd["scalar"] = torch.tensor(3.5)
    sd["empty"] = torch.zeros(0, 5)
    sd["param"] = torch.nn.Parameter(torch.randn(2, 2))
    save(sd, os.path.join(out, "dtypes.bin"))
    save(sd, os.path.join(out, "dtypes_legacy.bin"), _use_new_zipfile_serialization=False)
    expected = collections.OrderedDict((k, v.detach().contiguous()) for k, v in sd.items())
    for k in ("f16", "f16_strided", "bf16", "bf16_matrix_t"):
        expected[k + ".as_f32"] = sd[k].float().contiguous()
    write_safetensors(os.path.join(out, "dtypes.safetensors"), expected)


def bad_bins(out):
    w = struct.pack("<4f", 1, 2, 3, 4)
    good = {"version": b"3\n", "data/0": w}

    def tensor_dict(**kw):
        return collections.OrderedDict([("w", FakeTensor(FakeStorage("0", kw.get("numel", 4)), kw.get("offset", 0),
                                                         kw.get("size", (4,)), kw.get("stride", (1,))))])

    write_zip(os.path.join(out, "bad_global_posix_system.bin"),
              {"data.pkl": pickle.dumps({"w": Evil(os.system, "echo pwned")}, protocol=2), **good})
    write_zip(os.path.join(out, "bad_global_builtins_eval.bin"),
              {"data.pkl": pickle.dumps({"w": Evil(eval, "1+1")}, protocol=4), **good})
    write_zip(os.path.join(out, "bad_unknown_opcode.bin"), {"data.pkl": b"\x80\x02}q\x00\xff.", **good})
    write_zip(os.path.join(out, "bad_protocol0.bin"), {"data.pkl": pickle.dumps({"w": 1}, protocol=0), **good})
    write_zip(os.path.join(out, "bad_truncated_pickle.bin"), {"data.pkl": fake_pickle(tensor_dict())[:-5], **good})
    write_zip(os.path.join(out, "bad_lying_storage_size.bin"), {"data.pkl": fake_pickle(tensor_dict(numel=1000, size=(1000,))), **good})
    write_zip(os.path.join(out, "bad_view_out_of_bounds.bin"), {"data.pkl": fake_pickle(tensor_dict(size=(2, 2), stride=(2, 2))), **good})
    write_zip(os.path.join(out, "bad_missing_storage.bin"), {"data.pkl": fake_pickle(tensor_dict()), "version": b"3\n"})
    write_zip(os.path.join(out, "bad_not_a_tensor.bin"), {"data.pkl": pickle.dumps({"w": 1}, protocol=2), **good})
    write_zip(os.path.join(out, "bad_big_endian.bin"), {"data.pkl": fake_pickle(tensor_dict()), "byteorder": b"big", **good})
    write_zip(os.path.join(out, "bad_no_data_pkl.bin"), good)
    with open(os.path.join(out, "dtypes.bin"), "rb") as f:
        data = f.read()
    with open(os.path.join(out, "bad_truncated_zip.bin"), "wb") as f:
        f.write(data[:len(data) * 2 // 3])
    corrupt = bytearray(data)
    with zipfile.ZipFile(os.path.join(out, "dtypes.bin")) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    h = info.header_offset  # local header: 30 bytes, then the name and the extra field, then the data
    name_len, extra_len = struct.unpack("<HH", data[h + 26:h + 30])
    corrupt[h + 30 + name_len + extra_len + 5] ^= 0xFF  # a byte of the first storage's stored data
    with open(os.path.join(out, "bad_crc.bin"), "wb") as f:
        f.write(corrupt)
    with open(os.path.join(out, "bad_garbage.bin"), "wb") as f:
        f.write(b"\x00\x01garbage, not a checkpoint" * 4)
    with open(os.path.join(out, "dtypes_legacy.bin"), "rb") as f:
        legacy = f.read()
    with open(os.path.join(out, "bad_truncated_legacy.bin"), "wb") as f:
        f.write(legacy[:len(legacy) - 40])


def main():
    fixtures, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    fixture_bins(fixtures, out)
    dtype_bins(out)
    bad_bins(out)
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"wrote {len(os.listdir(out))} files, {total} bytes, to {out}")


if __name__ == "__main__":
    main()
