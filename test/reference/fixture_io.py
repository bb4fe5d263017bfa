"""Writer for named-tensor fixture files (read in C++ by test/fixture.h).

Layout, little endian: b"LLFX", uint32 version 1, uint32 count, then per record:
uint32 name_len, name (utf-8), uint32 dtype (0 float32, 1 int32), uint32 ndim,
uint32 dims[ndim], data.
"""
import struct

import numpy as np


def write_fixture(path, tensors):
    """tensors: dict name -> array-like (float -> float32, integer -> int32)."""
    with open(path, "wb") as f:
        f.write(b"LLFX")
        f.write(struct.pack("<II", 1, len(tensors)))
        for name, value in tensors.items():
            a = np.asarray(value)
            if np.issubdtype(a.dtype, np.integer):
                a, dtype = a.astype("<i4"), 1
            else:
                a, dtype = a.astype("<f4"), 0
            nb = name.encode("utf-8")
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<II", dtype, a.ndim))
            f.write(struct.pack("<%dI" % a.ndim, *a.shape))
            f.write(np.ascontiguousarray(a).tobytes())


def read_fixture(path):
    out = {}
    with open(path, "rb") as f:
        assert f.read(4) == b"LLFX"
        version, count = struct.unpack("<II", f.read(8))
        assert version == 1
        for _ in range(count):
            (nlen,) = struct.unpack("<I", f.read(4))
            name = f.read(nlen).decode("utf-8")
            dtype, ndim = struct.unpack("<II", f.read(8))
            shape = struct.unpack("<%dI" % ndim, f.read(4 * ndim))
            n = int(np.prod(shape)) if ndim else 1
            a = np.frombuffer(f.read(4 * n), dtype="<f4" if dtype == 0 else "<i4").reshape(shape)
            out[name] = a
    return out
