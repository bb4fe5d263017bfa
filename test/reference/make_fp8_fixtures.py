"""FP8 E4M3 / E5M2 and BF16 codec oracles -> test/fixtures/fp8.fix (read by test/test_fp8.cpp and
test/test_fp8_device.cu).

Oracles: ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2 and ml_dtypes.bfloat16 (ml_dtypes 0.6.0, numpy 2.4), with the
engine's policy (llmc/fp8.h, the same as CUDA's satfinite conversions) applied on top:
  - E4M3: ml_dtypes does not saturate, so inputs are clipped to [-448, 448] first (±Inf too);
    clipping before rounding is the same as satfinite after it, because everything in
    (448, 464] rounds to 448 anyway. Every NaN becomes 0x7F (ml_dtypes keeps the sign: 0xFF).
  - E5M2: the same with ±57344: everything in (57344, 61440) rounds to 57344, and from the tie
    61440 up ml_dtypes gives ±Inf where satfinite gives ±57344, which clipping first also gives.
    Every NaN becomes 0x7F.
  - BF16: every NaN becomes the canonical 0x7FFF (ml_dtypes gives 0x7FC0 / 0xFFC0).

Tensors:
  e4m3.decode       (256,) float32  value of every code, NaN for 0x7F and 0xFF
  e4m3.special_x    (n,) float32    hand-picked inputs (see special_inputs)
  e4m3.special_code (n,) int32      their codes
  e4m3.random_seed  (1,) int32      seed of the generator below
  e4m3.random_code  (2^18,) int32   codes of the 2^20 generated inputs, 4 per int32, little
                                    endian: input 4j in bits 0..7, 4j+1 in bits 8..15, ...
  e4m3.sum_code     (2^14,) int32   for every pair of codes (a, b), a = k >> 8, b = k & 255 for
                                    pair k: encode(decode(a) + decode(b)) with the sum in float32,
                                    the rounding one combine of a native FP8 SUM performs; packed
                                    4 per int32 as above
  e5m2.*            the same five tensors and e5m2.sum_code for E5M2 (special inputs built from
                    E5M2's codes; generated inputs with their own exponent range, see below)
  bf16.x / bf16.code (m,) float32 / int32: random and special inputs and their bf16 bits.

The 2^20 E4M3 inputs are not stored; test/test_fp8.cpp regenerates them. Draw k (0-based) is
r = splitmix64 output number k+1 from state `seed` (llmc/rand.h rand_u64: state += 0x9E3779B97F4A7C15,
then the usual three xor-shift-multiply steps), and with lo = r & 15:
  lo == 0: the float32 with bit pattern r >> 32 (any value: NaN, Inf, denormals, huge, tiny);
  else:    sign = (r >> 4) & 1, e = E0 + ((r >> 8) & 0xFFFF) % SPAN (uniform-ish in [E0, E0 + SPAN - 1]:
           flushed to zero, subnormal, normal and saturating targets; E0, SPAN = -14, 25 for E4M3
           and -20, 38 for E5M2), mantissa m = (r >> 32) &
           0x7FFFFF, truncated to its top 4 bits (m & 0x780000) when lo == 1 so that exact codes
           and ties come up often; bits = sign << 31 | (e + 127) << 23 | m.
"""
import argparse
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import write_fixture  # noqa: E402

E4M3_MAX = 448.0
E5M2_MAX = 57344.0
# exponent range of the generated inputs: (first exponent, number of exponents)
E_RANGE = {"e4m3": (-14, 25), "e5m2": (-20, 38)}
DTYPE = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
FMT_MAX = {"e4m3": E4M3_MAX, "e5m2": E5M2_MAX}
RANDOM_COUNT = 1 << 20
BF16_RANDOM_COUNT = 100000
MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def bits_to_f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def fp8_oracle(x, fmt="e4m3"):
    x = np.asarray(x, dtype=np.float32)
    nan = np.isnan(x)
    top = FMT_MAX[fmt]
    with np.errstate(invalid="ignore"):  # NaN inputs; replaced below
        codes = np.clip(x, -top, top).astype(DTYPE[fmt]).view(np.uint8).copy()
    codes[nan] = 0x7F
    return codes


def e4m3_oracle(x):
    return fp8_oracle(x, "e4m3")


def sum_codes(fmt):
    """encode(decode(a) + decode(b)) in float32 for all 2^16 pairs, pair k = (k >> 8, k & 255)."""
    dec = np.arange(256, dtype=np.uint8).view(DTYPE[fmt]).astype(np.float32)
    k = np.arange(1 << 16)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf - Inf and NaN pairs: NaN, as intended
        s = dec[k >> 8] + dec[k & 255]
    return fp8_oracle(s, fmt)


def bf16_oracle(x):
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        codes = x.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.int32)
    codes[np.isnan(x)] = 0x7FFF
    return codes


def splitmix64(seed, count):
    """Outputs 1..count of splitmix64 started at state `seed` (llmc/rand.h rand_u64)."""
    with np.errstate(over="ignore"):
        k = np.arange(1, count + 1, dtype=np.uint64)
        z = (np.uint64(seed) + k * np.uint64(0x9E3779B97F4A7C15)) & MASK64
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def random_inputs(seed, count, fmt="e4m3"):
    e0, span = E_RANGE[fmt]
    r = splitmix64(seed, count)
    lo = r & np.uint64(15)
    raw = (r >> np.uint64(32)).astype(np.uint32)
    sign = ((r >> np.uint64(4)) & np.uint64(1)).astype(np.uint32)
    e = (((r >> np.uint64(8)) & np.uint64(0xFFFF)) % np.uint64(span)).astype(np.int64) + e0
    m = raw & np.uint32(0x7FFFFF)
    m = np.where(lo == 1, m & np.uint32(0x780000), m)
    built = (sign << np.uint32(31)) | ((e + 127).astype(np.uint32) << np.uint32(23)) | m
    return bits_to_f32(np.where(lo == 0, raw, built).astype(np.uint32))


def special_inputs(fmt="e4m3"):
    f32 = np.float32
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(DTYPE[fmt]).astype(np.float32)
    pos = np.unique(values[(values >= 0) & np.isfinite(values)])  # 0 .. max, sorted
    nxt = {"e4m3": 480.0, "e5m2": 65536.0}[fmt]  # where the next code would be
    grid = np.append(pos.astype(np.float64), nxt)
    mids = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)  # exact in float32
    xs = [pos, mids, np.nextafter(mids, f32(np.inf)), np.nextafter(mids, f32(0))]
    inf = f32(np.inf)
    if fmt == "e5m2":
        sub = 2.0 ** -16
        xs.append(np.array([
            sub, sub / 2, 0.75 * sub, 0.25 * sub, 1.25 * sub, 1.5 * sub, 2.5 * sub,
            np.nextafter(f32(sub / 2), inf), np.nextafter(f32(sub / 2), f32(0)),
            np.nextafter(f32(2.0 ** -14), f32(0)), np.nextafter(f32(2.0 ** -14), inf),
            49152, 57344, np.nextafter(f32(57344), inf), 61439, np.nextafter(f32(61440), f32(0)), 61440,
            np.nextafter(f32(61440), inf), 65536, 1e6, 3.0e38, np.finfo(np.float32).max, inf,
            np.finfo(np.float32).tiny, bits_to_f32(1), bits_to_f32(0x007FFFFF), 1e-30, 1.0 / 3.0, 0.1, np.pi,
            448, 464, 480,
        ], dtype=np.float32))
        x = np.concatenate([a.astype(np.float32) for a in xs])
        x = np.concatenate([x, -x])
        nans = bits_to_f32([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF])
        return np.concatenate([x, nans])
    sub = 2.0 ** -9
    xs.append(np.array([
        sub, sub / 2, 0.75 * sub, 0.25 * sub, 1.25 * sub, 1.5 * sub, 2.5 * sub,
        np.nextafter(f32(sub / 2), inf), np.nextafter(f32(sub / 2), f32(0)),
        np.nextafter(f32(2.0 ** -6), f32(0)), np.nextafter(f32(2.0 ** -6), inf),
        447, 448, np.nextafter(f32(448), inf), 450, 456, 463.99, 464, np.nextafter(f32(464), inf),
        np.nextafter(f32(464), f32(0)), 465, 479, 480, 481, 512, 1e6, 3.0e38,
        np.finfo(np.float32).max, inf, np.finfo(np.float32).tiny,
        bits_to_f32(1), bits_to_f32(0x007FFFFF), 1e-30, 1.0 / 3.0, 0.1, np.pi,
    ], dtype=np.float32))
    x = np.concatenate([a.astype(np.float32) for a in xs])
    x = np.concatenate([x, -x])  # both signs of everything, including -0.0
    nans = bits_to_f32([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF])
    return np.concatenate([x, nans])


def bf16_inputs(rng):
    n = BF16_RANDOM_COUNT // 2
    raw = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    # upper halves at random, lower halves from the rounding-relevant set (ties, just around them)
    hi = rng.integers(0, 1 << 16, size=n, dtype=np.uint64).astype(np.uint32)
    lows = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
    lo = lows[rng.integers(0, len(lows), size=n)]
    tie_like = (hi << np.uint32(16)) | lo
    special = np.array([
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
        0xFF800001, 0x7FFFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F7E8000,
        0x00000001, 0x00008000, 0x00018000, 0x00007FFF, 0x007FFFFF, 0x807FFFFF, 0x00800000,
        0x3F808000, 0x3F818000, 0x3F80C000, 0x3F807FFF, 0xBF808000, 0xBF818000,
    ], dtype=np.uint32)
    return bits_to_f32(np.concatenate([special, raw, tie_like]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=8080)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "fixtures", "fp8.fix"))
    args = ap.parse_args()
    fx = {}
    all_codes = np.arange(256, dtype=np.uint8)
    fx["e4m3.decode"] = all_codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)

    sx = special_inputs()
    fx["e4m3.special_x"] = sx
    fx["e4m3.special_code"] = e4m3_oracle(sx).astype(np.int32)

    rx = random_inputs(args.seed, RANDOM_COUNT)
    rc = e4m3_oracle(rx)
    fx["e4m3.random_seed"] = np.array([args.seed], dtype=np.int32)
    fx["e4m3.random_code"] = rc.view("<u4").view(np.int32)

    fx["e4m3.sum_code"] = sum_codes("e4m3").view("<u4").view(np.int32)

    fx["e5m2.decode"] = all_codes.view(ml_dtypes.float8_e5m2).astype(np.float32)
    sx5 = special_inputs("e5m2")
    fx["e5m2.special_x"] = sx5
    fx["e5m2.special_code"] = fp8_oracle(sx5, "e5m2").astype(np.int32)
    rx5 = random_inputs(args.seed + 1, RANDOM_COUNT, "e5m2")
    rc5 = fp8_oracle(rx5, "e5m2")
    fx["e5m2.random_seed"] = np.array([args.seed + 1], dtype=np.int32)
    fx["e5m2.random_code"] = rc5.view("<u4").view(np.int32)
    fx["e5m2.sum_code"] = sum_codes("e5m2").view("<u4").view(np.int32)

    bx = bf16_inputs(np.random.default_rng(args.seed))
    fx["bf16.x"] = bx
    fx["bf16.code"] = bf16_oracle(bx)

    write_fixture(args.out, fx)
    counts = np.bincount(rc, minlength=256)
    print("wrote %s: %d special e4m3 inputs, %d random (%d NaN, %d ±448, %d ±0), %d bf16 inputs" % (
        args.out, len(sx), RANDOM_COUNT, counts[0x7F] + counts[0xFF], counts[0x7E] + counts[0xFE],
        counts[0x00] + counts[0x80], len(bx)))
    c5 = np.bincount(rc5, minlength=256)
    print("  e5m2: %d special inputs, %d random (%d NaN, %d ±57344, %d ±0, %d subnormal)" % (
        len(sx5), RANDOM_COUNT, c5[0x7F] + c5[0xFF], c5[0x7B] + c5[0xFB], c5[0x00] + c5[0x80],
        sum(c5[c] + c5[c | 0x80] for c in (1, 2, 3))))


if __name__ == "__main__":
    main()
