"""rewrite_launches.py SRC DST — copy the CUDA engine's sources (train_llama.cu, llmc/, test/,
dev/cuda/) from the repository root SRC into DST, turning every kernel launch

    kernel<<<grid, block, smem, stream>>>(args);
into
    EMU_LAUNCH("kernel", fibers, (const void*)(kernel), grid, block, smem, kernel(args));

(smem 0 when the launch gives none; the kernel's address keys its cudaFuncSetAttribute), and
opens the body of every kernel declared with __launch_bounds__(MAX, ...) with
`if (emu_launch_bound(MAX)) return;` (evaluated where the kernel's template arguments are known:
a block of more threads runs none of the body and leaves a launch error, as a GPU refuses that
launch) and every `extern __shared__ T name[];` into
`T* name = (T*)emu_dynamic_smem();`, where fibers is true when the kernel's body (or a __device__ function it calls, transitively) uses
__syncthreads, a named barrier, an mbarrier, a warp collective, setmaxnreg or wgmma, so dev/emu runs its threads as fibers. data/ and
test/fixtures are linked, not copied. Prints one line per kernel with its launch style."""
import os
import re
import shutil
import sys

SYNC_TOKENS = ["__syncthreads", "__syncwarp", "bar_sync", "mbar_", "__shfl", "__reduce_", "emu_warp_", "warpgroup_registers_",
               "wgmma_", "Wgmma<"]


def block_after(text, start, opening="{", closing="}"):
    """The balanced opening...closing block that starts at the first `opening` at or after start."""
    i = text.index(opening, start)
    depth, j = 0, i
    while True:
        if text[j] == opening:
            depth += 1
        elif text[j] == closing:
            depth -= 1
            if depth == 0:
                return text[i:j + 1]
        j += 1


def split_top(s):
    """Split a launch configuration at top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        if ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def main():
    if len(sys.argv) != 3:
        sys.exit("error: usage: rewrite_launches.py SRC DST (SRC the repository root, DST the folder to write)")
    src, dst = sys.argv[1], sys.argv[2]
    if not os.path.isfile(os.path.join(src, "train_llama.cu")) or not os.path.isdir(os.path.join(src, "llmc")):
        sys.exit("error: rewrite_launches.py: '%s' is not the repository root (expected train_llama.cu and llmc/ in it)" % src)
    files = ["train_llama.cu"]
    for d in ["llmc", "test", "dev/cuda"]:
        files += [os.path.join(d, f) for f in sorted(os.listdir(os.path.join(src, d)))
                  if os.path.isfile(os.path.join(src, d, f))]
    texts = {f: open(os.path.join(src, f), encoding="utf-8").read() for f in files}

    kernels, helpers = {}, {}
    for f, t in texts.items():
        # (a launch bound's arguments may hold one level of parentheses)
        for m in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s+)?(\w+)\s*\(", t):
            kernels[m.group(1)] = block_after(t, m.end())
        for m in re.finditer(r"__device__[^;{(]*?\b(\w+)\s*\([^;{]*\)\s*(const\s*)?\{", t):
            helpers[m.group(1)] = block_after(t, m.end() - 1)
    tokens = list(SYNC_TOKENS)
    changed = True
    while changed:  # helpers that synchronize, transitively
        changed = False
        for name, body in helpers.items():
            if name not in tokens and any(tok in body for tok in tokens):
                tokens.append(name)
                changed = True

    def fibers(name):
        if name not in kernels:
            sys.exit("error: rewrite_launches.py: no body found for kernel %s" % name)
        return any(tok in kernels[name] for tok in tokens)

    def bound_kernels(t):
        """t with `if (emu_launch_bound(MAX)) return;` opening the body of each kernel defined
        with __launch_bounds__(MAX[, MIN_BLOCKS])."""
        spots = []
        for m in re.finditer(r"__global__\s+void\s+__launch_bounds__\(((?:[^()]|\([^()]*\))*)\)\s+(\w+)\s*\(", t):
            after = m.end() - 1 + len(block_after(t, m.end() - 1, "(", ")"))
            body = re.match(r"\s*\{", t[after:])
            if body:  # (a declaration without its body has none to open)
                spots.append((after + body.end(), split_top(m.group(1))[0]))
        for at, bound in reversed(spots):
            t = t[:at] + " if (emu_launch_bound(%s)) return;" % bound + t[at:]
        return t

    def rewrite(t):
        out, pos = "", 0
        while True:
            k = t.find("<<<", pos)
            if k < 0:
                return out + t[pos:]
            m = re.search(r"(\w+)(<[^<>;]*>)?\s*$", t[:k])  # the kernel name, template arguments
            name, targs = m.group(1), m.group(2) or ""
            e = t.index(">>>", k)
            cfg = split_top(t[k + 3:e])
            p = e + 3
            while t[p].isspace():
                p += 1
            args = block_after(t, p, "(", ")")[1:-1]
            out += t[pos:m.start()] + 'EMU_LAUNCH("%s", %s, (const void*)(%s%s), %s, %s, %s, %s%s(%s))' % (
                name, "true" if fibers(name) else "false", name, targs, cfg[0], cfg[1], cfg[2] if len(cfg) > 2 else "0",
                name, targs, args)
            pos = p + 1 + len(args) + 1

    real_src, real_dst = os.path.realpath(src), os.path.realpath(dst)
    if real_dst == real_src or real_src.startswith(real_dst.rstrip(os.sep) + os.sep):
        sys.exit("error: rewrite_launches.py: DST '%s' holds the sources SRC '%s' (it is emptied first): name a folder of its own" % (dst, src))
    try:
        write_tree(src, dst, texts, bound_kernels, rewrite)
    except OSError as e:
        sys.exit("error: rewrite_launches.py: cannot write '%s' (%s)" % (e.filename or dst, e.strerror))
    for name in sorted(kernels):
        print("  %-45s %s" % (name, "fibers" if fibers(name) else "plain"))


def write_tree(src, dst, texts, bound_kernels, rewrite):
    """DST emptied, then every source rewritten into it; data/ and test/fixtures linked."""
    shutil.rmtree(dst, ignore_errors=True)
    for f, t in texts.items():
        path = os.path.join(dst, f)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            if f.endswith((".cu", ".cuh")):
                t = re.sub(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?(\w+)\s+(\w+)\s*\[\s*\]\s*;",
                           r"\1* \2 = (\1*)emu_dynamic_smem();", rewrite(bound_kernels(t)))
            out.write(t)
    for d in ["data", "test/fixtures"]:
        os.symlink(os.path.abspath(os.path.join(src, d)), os.path.join(dst, d))


if __name__ == "__main__":
    main()
