#!/usr/bin/env python3
"""Write a PyTorch .pth exactly as `torch.save(OrderedDict[str, Tensor], path)` does, from a
SafeTensors file, with the Python standard library only (no torch, no numpy).

Why: the engine's .pth reader is tested on a real-format file, CI has python3 but not torch,
and the ~34 MB tiny .pth must not be committed. The test (`tests/format_pth.rs`) runs this
into a scratch folder outside the source tree.

Format written (torch/serialization.py `_save` + caffe2 `PyTorchStreamWriter`):
  zip, every entry STORED, each entry's data aligned to 64 bytes by an "FB" padding extra
  field in its local header; records under `<stem>/` (torch uses the file's stem):
    data.pkl             pickle protocol 2 of the OrderedDict, made by CPython's own
                         Pickler: classes and functions are pickled by reference, so
                         stand-ins registered as `torch.BFloat16Storage` and
                         `torch._utils._rebuild_tensor_v2` give the same opcodes as torch;
                         storages go out through persistent_id as
                         ('storage', torch.<T>Storage, '<key>', 'cpu', numel)
    .format_version      "1"
    .storage_alignment   "64"
    byteorder            "little"
    data/<key>           raw little-endian tensor bytes, keys "0", "1", ... in dict order
    version              "3\\n"
    .data/serialization_id
  Each tensor: _rebuild_tensor_v2(storage, 0, size, contiguous stride, False, OrderedDict()).

Values: f16 -> bf16 keeps the top 16 bits of the f32 value, which is exact for values that
bf16 represents (the fixtures are made so); the script checks that and refuses otherwise.

usage: make_pth.py IN.safetensors OUT.pth [--dtype bf16|f16|f32] [--prefix NAME]
"""
import argparse
import collections
import io
import json
import os
import pickle
import struct
import sys
import types
import zipfile

ALIGN = 64  # torch's storage alignment (_get_storage_alignment)


# ---- stand-ins that pickle exactly like torch's own objects -------------------------------

def _install_torch_standins():
    """Registers fake `torch` / `torch._utils` modules (in this process only) so that the
    pickler, which pickles classes and functions by module + name and checks they can be
    imported back, writes `torch.BFloat16Storage` and `torch._utils._rebuild_tensor_v2`."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):  # never called: only its name is pickled
        raise RuntimeError("stand-in")

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    storages = {}
    for name in ("BFloat16Storage", "HalfStorage", "FloatStorage"):
        cls = type(name, (), {"__module__": "torch"})
        setattr(torch, name, cls)
        storages[name] = cls
    torch._utils = utils
    sys.modules["torch"] = torch
    sys.modules["torch._utils"] = utils
    return _rebuild_tensor_v2, storages


class Storage:
    def __init__(self, cls, key, numel, data):
        self.cls, self.key, self.numel, self.data = cls, key, numel, data


class Tensor:
    """Reduces like torch.Tensor.__reduce_ex__ for a plain contiguous CPU tensor."""

    rebuild = None

    def __init__(self, storage, shape):
        self.storage, self.shape = storage, tuple(shape)

    def __reduce_ex__(self, protocol):
        stride, acc = [], 1
        for d in reversed(self.shape):
            stride.append(acc)
            acc *= d
        stride = tuple(reversed(stride))
        return (Tensor.rebuild, (self.storage, 0, self.shape, stride, False, collections.OrderedDict()))


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


# ---- SafeTensors in, converted bytes out -------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as fh:
        blob = fh.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return [(k, v["dtype"], v["shape"], blob[base + v["data_offsets"][0]: base + v["data_offsets"][1]])
            for k, v in items]


def to_f32_bytes(dtype, raw):
    if dtype == "F32":
        return raw
    if dtype == "F16":
        n = len(raw) // 2
        out = bytearray()
        step = 1 << 20
        for i in range(0, n, step):
            k = min(step, n - i)
            out += struct.pack("<%df" % k, *struct.unpack_from("<%de" % k, raw, 2 * i))
        return bytes(out)
    if dtype == "BF16":
        out = bytearray(2 * len(raw))
        out[2::4] = raw[0::2]
        out[3::4] = raw[1::2]
        return bytes(out)
    raise SystemExit(f"unsupported SafeTensors dtype {dtype}")


def convert(name, dtype, raw, out_dtype):
    if dtype == out_dtype.upper():
        return raw
    f32 = to_f32_bytes(dtype, raw)
    if out_dtype == "f32":
        return f32
    if out_dtype == "bf16":
        if any(f32[0::4]) or any(f32[1::4]):
            raise SystemExit(f"{name}: a value is not exactly representable in bf16")
        out = bytearray(len(f32) // 2)
        out[0::2] = f32[2::4]
        out[1::2] = f32[3::4]
        return bytes(out)
    if out_dtype == "f16":
        n = len(f32) // 4
        vals = struct.unpack("<%df" % n, f32)
        out = struct.pack("<%de" % n, *vals)
        if struct.unpack("<%de" % n, out) != vals:
            raise SystemExit(f"{name}: a value is not exactly representable in f16")
        return out
    raise SystemExit(f"unknown dtype {out_dtype}")


# ---- the zip, as PyTorchStreamWriter lays it out ----------------------------------------

def write_record(zf, fh, name, data):
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 0
    # Local header = 30 bytes + name + extra; pad with an "FB" field so the data starts on
    # a multiple of 64, as torch's writer does.
    start = fh.tell() + 30 + len(name.encode())
    pad = (-(start + 4)) % ALIGN
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    zf.writestr(info, data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16",
                    help="tensor dtype in the .pth (official RWKV-7 releases are bf16)")
    ap.add_argument("--prefix", default=None, help="top-level folder (default: the output's stem, as torch)")
    args = ap.parse_args()

    rebuild, storages = _install_torch_standins()
    Tensor.rebuild = rebuild
    cls = {"bf16": storages["BFloat16Storage"], "f16": storages["HalfStorage"],
           "f32": storages["FloatStorage"]}[args.dtype]
    esize = {"bf16": 2, "f16": 2, "f32": 4}[args.dtype]

    state = collections.OrderedDict()
    blobs = []
    for key, (name, dtype, shape, raw) in enumerate(read_safetensors(args.src)):
        data = convert(name, dtype, raw, args.dtype)
        storage = Storage(cls, str(key), len(data) // esize, data)
        blobs.append(storage)
        state[name] = Tensor(storage, shape)

    buf = io.BytesIO()
    TorchPickler(buf, protocol=2).dump(state)

    prefix = args.prefix or os.path.splitext(os.path.basename(args.out))[0]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        write_record(zf, fh, f"{prefix}/data.pkl", buf.getvalue())
        write_record(zf, fh, f"{prefix}/.format_version", b"1")
        write_record(zf, fh, f"{prefix}/.storage_alignment", str(ALIGN).encode())
        write_record(zf, fh, f"{prefix}/byteorder", b"little")
        for s in blobs:
            write_record(zf, fh, f"{prefix}/data/{s.key}", s.data)
        write_record(zf, fh, f"{prefix}/version", b"3\n")
        write_record(zf, fh, f"{prefix}/.data/serialization_id", b"0" * 20)
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(state)} tensors ({args.dtype}), {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
