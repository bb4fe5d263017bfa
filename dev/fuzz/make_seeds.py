"""Writes a small seed corpus for build/fuzz_parsers: one valid input per parser."""
import os
import struct
import sys
import zlib

if len(sys.argv) != 2:
    sys.exit(f"error: expected one argument, the corpus folder DIR (made if missing), found {len(sys.argv) - 1}")
out = sys.argv[1]
if os.path.exists(out) and not os.path.isdir(out):
    sys.exit(f"error: '{out}' is not a folder (expected the corpus folder DIR)")
try:
    os.makedirs(out, exist_ok=True)
    probe = os.path.join(out, ".probe")
    open(probe, "wb").close()
    os.remove(probe)
except OSError as e:
    sys.exit(f"error: cannot write in '{out}' ({e.strerror})")
# 0: a shard of 10 tokens
h = struct.pack("<3i", 20240520, 1, 10) + b"\0" * (1024 - 12)
open(os.path.join(out, "shard"), "wb").write(b"\0" + h + bytes(20))
# 1: a model header of a 1-layer toy model, no payload (size mismatch path)
h = struct.pack("<10i", 20250301, 1, 8, 8, 4, 1, 2, 1, 4, 4) + b"\0" * (1024 - 40)
open(os.path.join(out, "model"), "wb").write(b"\1" + h)
# 2: a valid state file: 64 int64 header, settings, m, v, one extra
settings = b"B=1\n"
m = struct.pack("<2f", 1.0, 2.0)
v = struct.pack("<2f", 3.0, 4.0)
extra = struct.pack("<q", 1) + b"r" + struct.pack("<q", 1) + struct.pack("<f", 5.0)
crc = zlib.crc32(settings + m + v + extra)
hdr = [20250302, 1, 3, 0, 1, 0, 0, 0, 0, len(settings), 2, 2, 1, crc] + [0] * 50
open(os.path.join(out, "state"), "wb").write(b"\2" + struct.pack("<64q", *hdr) + settings + m + v + extra)
# 3: a valid version-2 state file: the share [2, 4) of 6 parameters' moments, which carry their own CRC
m2 = struct.pack("<2f", 1.5, 2.5)
v2 = struct.pack("<2f", 3.5, 4.5)
hdr = [20250302, 2, 3, 1, 3, 0, 0, 0, 0, len(settings), 2, 2, 1, zlib.crc32(settings + extra), 2, 6, zlib.crc32(m2 + v2)] + [0] * 47
open(os.path.join(out, "state_v2"), "wb").write(b"\2" + struct.pack("<64q", *hdr) + settings + m2 + v2 + extra)
