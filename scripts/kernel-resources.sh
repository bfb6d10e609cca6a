#!/usr/bin/env bash
# The compiler's resource usage per CUDA kernel (registers, spills, stack, static shared memory,
# __launch_bounds__) as a table, so that a change which adds spills or registers, or breaks a launch
# configuration, shows up without a GPU.
#
# Compiles every cuda/kernels/*.cu the way cuda/CMakeLists.txt builds stoke_cuda (Release flags,
# device code only) for sm_80 and sm_90 with `-Xptxas -v`, reads ptxas's report per kernel and the
# PTX's .maxntid (what __launch_bounds__ became), and checks each kernel instance:
#   registers (allocated per warp in units of 8 per thread) x __launch_bounds__ threads must fit the
#   65536-register file of one SM, and static shared memory must be <= 48 KiB (the most a kernel can
#   declare statically). A kernel that breaks either cannot be launched as its bounds promise.
#
# Usage: scripts/kernel-resources.sh --write   regenerate docs/kernel-resources.md
#        scripts/kernel-resources.sh --check   regenerate into a temp file and diff against the
#                                              committed one (CI's `kernels` stage)
# Exit status: 0 ok; 1 a FAIL (launch configuration) or, with --check, a difference; 2 a usage,
# toolchain or compile error. Env: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc),
# KERNEL_RESOURCES_JOBS (files compiled at once, default 2: CI machines have 2 cores).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
doc=docs/kernel-resources.md
archs=(80 90)
jobs=${KERNEL_RESOURCES_JOBS:-2}

mode=${1:-}
if [[ $# != 1 || ($mode != --write && $mode != --check) ]]; then
  echo "usage: $0 --write | --check" >&2
  exit 2
fi

# The same lookup as the top-level CMakeLists.txt (find_program HINTS /usr/local/cuda/bin).
nvcc=${NVCC:-$(command -v nvcc || true)}
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
if [[ -z $nvcc ]]; then
  echo "kernel-resources: nvcc not found (set NVCC or install the CUDA toolkit)" >&2
  exit 2
fi
# c++filt (binutils, always next to g++) rather than cu++filt, which not every toolkit install has:
# the table must demangle the same wherever it is regenerated.
if ! command -v c++filt >/dev/null; then
  echo "kernel-resources: c++filt (binutils) not found" >&2
  exit 2
fi

tmp=$(mktemp -d /tmp/stoke-kernel-resources.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# stoke_cuda's CUDA flags as CMake passes them (cuda/CMakeLists.txt, Release build type):
# -O3 -DNDEBUG matter here (NDEBUG drops device asserts, which cost registers). Host-only flags
# (-Xcompiler=-Wall,-Wextra,-fPIC) are left out: --fatbin compiles device code only.
flags=(-O3 -DNDEBUG -DSTOKE_HAS_CUDA=1 -I"$repo" -std=c++20 --expt-relaxed-constexpr)
gencode=()
for a in "${archs[@]}"; do
  gencode+=(-gencode "arch=compute_$a,code=sm_$a")
done

# One nvcc call per file for both archs (one front end pass per arch, no host compile).
# --keep leaves the PTX, whose .maxntid is __launch_bounds__ as the compiler saw it.
compile() {
  local src=$1 name
  name=$(basename "$src" .cu)
  mkdir -p "$tmp/$name"
  local rc=0
  "$nvcc" "${flags[@]}" "${gencode[@]}" -Xptxas -v --fatbin -o "$tmp/$name/out.fatbin" \
    --keep --keep-dir "$tmp/$name" "$src" >"$tmp/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$tmp/$name.rc"
  # Only the PTX and the log are read; the preprocessed sources are megabytes each.
  find "$tmp/$name" -type f ! -name '*.ptx' -delete
}

shopt -s nullglob
sources=("$repo"/cuda/kernels/*.cu)
if [[ ${#sources[@]} == 0 ]]; then
  echo "kernel-resources: no cuda/kernels/*.cu" >&2
  exit 2
fi
printf -v archlist 'sm_%s ' "${archs[@]}"
echo "kernel-resources: compiling ${#sources[@]} files for ${archlist% } with $nvcc, $jobs at once" >&2
for src in "${sources[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do
    wait -n || true
  done
  compile "$src" &
done
wait

errors=0
for src in "${sources[@]}"; do
  name=$(basename "$src" .cu)
  if [[ $(cat "$tmp/$name.rc") != 0 ]]; then
    echo "kernel-resources: nvcc failed on cuda/kernels/$name.cu:" >&2
    grep -v '^ptxas info\|bytes stack frame' "$tmp/$name.log" >&2 || true
    errors=1
  fi
done
((errors == 0)) || exit 2

nvcc_banner=$("$nvcc" --version)
nvcc_version=$(grep -m1 'release' <<<"$nvcc_banner" || tail -n 1 <<<"$nvcc_banner")
out=$tmp/kernel-resources.md
rc=0
python3 - "$tmp" "$repo" "$out" "$nvcc_version" "${archs[@]}" <<'PY' || rc=$?
import glob, os, re, subprocess, sys, textwrap

tmp, repo, out, nvcc_version = sys.argv[1:5]
archs = sys.argv[5:]
REGFILE = 65536        # 32-bit registers per SM (and per block) on sm_80 and sm_90
SMEM_STATIC = 48 * 1024  # the most shared memory a kernel may declare statically

def die(msg):
    print("kernel-resources: " + msg, file=sys.stderr)
    sys.exit(2)

# --- ptxas's report: one record per (file, arch, mangled kernel) ---
entry_re = re.compile(r"Compiling entry function '([^']+)' for 'sm_(\d+)'")
props_re = re.compile(r"Function properties for (\S+)")
frame_re = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
used_re = re.compile(r"Used (\d+) registers")
smem_re = re.compile(r"(\d+) bytes smem")
records = {}  # (file, arch, mangled) -> dict
for log in sorted(glob.glob(os.path.join(tmp, "*.log"))):
    name = os.path.basename(log)[:-4]
    cur = props = None
    for line in open(log, encoding="utf-8", errors="replace"):
        if m := entry_re.search(line):
            cur = {"file": name + ".cu", "arch": m.group(2), "mangled": m.group(1)}
            records[(name, cur["arch"], cur["mangled"])] = cur
            props = None
        elif m := props_re.search(line):
            props = m.group(1)
        elif (m := frame_re.search(line)) and cur and props == cur["mangled"]:
            cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
        elif (m := used_re.search(line)) and cur:
            cur["regs"] = int(m.group(1))
            s = smem_re.search(line)
            cur["smem"] = int(s.group(1)) if s else 0
            cur = None
for r in records.values():
    # A record without these means ptxas's wording changed: fail rather than report zeros.
    if "regs" not in r or "stack" not in r:
        die(f"could not parse ptxas's report for {r['mangled']} (sm_{r['arch']}) in {r['file']}")
if not records:
    die("ptxas reported no kernels")

# --- __launch_bounds__: .maxntid (and .minnctapersm) after each .entry's parameters in the PTX ---
ptx_entry_re = re.compile(r"\.entry\s+([\w$.]+)\s*\((.*?)\)\s*"
                          r"((?:\.(?:maxntid|reqntid|minnctapersm|maxnreg|maxclusterrank|pragma)"
                          r"[^\n{]*\s*)*)\{", re.S)
bounds = {}  # (file, arch, mangled) -> (threads or None, min blocks per SM)
for ptx in glob.glob(os.path.join(tmp, "*", "*.ptx")):
    name = os.path.basename(os.path.dirname(ptx))
    m = re.search(r"\.compute_(\d+)\.ptx$", ptx)
    if not m:
        continue
    arch = m.group(1)
    for e in ptx_entry_re.finditer(open(ptx, encoding="utf-8", errors="replace").read()):
        directives = e.group(3)
        threads = None
        if t := re.search(r"\.(?:maxntid|reqntid)\s+([\d,\s]+)", directives):
            threads = 1
            for v in t.group(1).replace(",", " ").split():
                threads *= int(v)
        mb = re.search(r"\.minnctapersm\s+(\d+)", directives)
        bounds[(name, arch, e.group(1))] = (threads, int(mb.group(1)) if mb else 1)
for key, r in records.items():
    if key not in bounds:
        die(f"no .entry for {r['mangled']} in the PTX of {r['file']} (sm_{r['arch']})")
    r["threads"], r["min_blocks"] = bounds[key]

# --- names: demangled, namespaces dropped, dtypes and enum values spelled as the project does ---
mangled = sorted({r["mangled"] for r in records.values()})
dem = subprocess.run(["c++filt"], input="\n".join(mangled) + "\n", capture_output=True, text=True,
                     check=True).stdout.splitlines()
if len(dem) != len(mangled):
    die("c++filt returned a different number of names")
demangled = dict(zip(mangled, dem))

# Enumerators of `enum class` in cuda/kernels, so that (CompareOp)2 reads `lt`. Enums declared
# from core/elementwise_ops.h's lists (enum class E { STOKE_BINARY_OPS(STOKE_ENUMERATOR) }) have
# those lists expanded first.
op_lists = {}
ops_header = open(os.path.join(repo, "core", "elementwise_ops.h"), encoding="utf-8").read()
for m in re.finditer(r"#define\s+(STOKE_\w+_OPS)\(X\)((?:[^\n]*\\\n)*[^\n]*)", ops_header):
    # A list may open with another (STOKE_UNARY_OPS is STOKE_UNARY_FUNCTION_OPS(X) X(gelu) ...):
    # its names are spliced in where it stands, from the lists defined above it.
    names = []
    for ref, name in re.findall(r"(STOKE_\w+_OPS)\(X\)|X\((\w+)\)", m.group(2)):
        names += op_lists.get(ref, []) if ref else [name]
    op_lists[m.group(1)] = names
enums = {}
for path in sorted(glob.glob(os.path.join(repo, "cuda", "kernels", "*.[hc]*"))):
    text = re.sub(r"//[^\n]*", "", open(path, encoding="utf-8", errors="replace").read())
    text = re.sub(r"(STOKE_\w+_OPS)\(STOKE_ENUMERATOR\)",
                  lambda m: "".join(n + ", " for n in op_lists.get(m.group(1), [m.group(0)])), text)
    for m in re.finditer(r"enum\s+class\s+(\w+)\s*(?::\s*[\w:]+\s*)?\{([^}]*)\}", text):
        values, v = {}, -1
        for item in filter(None, (s.strip() for s in m.group(2).split(","))):
            n, _, init = item.partition("=")
            try:
                v = int(init.strip(), 0) if init.strip() else v + 1
            except ValueError:
                values = None
                break
            values[v] = n.strip()
        if values is not None:
            # The same name defined twice with different enumerators: leave its numbers alone.
            clash = m.group(1) in enums and enums[m.group(1)] != values
            enums[m.group(1)] = None if clash else values

DTYPES = [("unsigned char", "u8"), ("unsigned short", "u16"), ("unsigned int", "u32"),
          ("unsigned long long", "u64"), ("unsigned long", "u64"), ("signed char", "i8"),
          ("long long", "i64"), ("long", "i64"), ("int", "i32"), ("short", "i16"),
          ("float", "f32"), ("double", "f64"), ("__half", "f16"), ("__nv_bfloat16", "bf16")]
dtype_re = re.compile(r"(?<![\w])(" + "|".join(re.escape(a) for a, _ in DTYPES) + r")(?![\w])")
dtype_map = dict(DTYPES)

def split_top(s):
    """s's name/template part and its top-level parameter list (without parentheses)."""
    depth = 0
    for i, c in enumerate(s):
        if c in "<":
            depth += 1
        elif c in ">":
            depth -= 1
        elif c == "(" and depth == 0 and not s[i:].startswith("(anonymous namespace)"):
            return s[:i], s[i + 1:s.rindex(")")]
    return s, ""

def tidy(s):
    s = re.sub(r"(?:\(anonymous namespace\)::|\b[A-Za-z_]\w*::)+", "", s)
    def enum(m):
        values = enums.get(m.group(1))
        return values[int(m.group(2))] if values and int(m.group(2)) in values else m.group(0)
    s = re.sub(r"\((\w+)\)(-?\d+)", enum, s)
    s = dtype_re.sub(lambda m: dtype_map[m.group(1)], s)
    s = re.sub(r"\s*>", ">", s)  # `UnaryF<relu> >` -> `UnaryF<relu>>`
    return s.strip()

short = {}
for m, d in demangled.items():
    head, params = split_top(re.sub(r"^void\s+", "", d))
    short[m] = (tidy(head), tidy(params))
# Overloads with the same template arguments would read the same: those keep their parameters.
by_name = {}
for r in records.values():
    by_name.setdefault((r["file"], short[r["mangled"]][0]), set()).add(r["mangled"])
for r in records.values():
    head, params = short[r["mangled"]]
    clash = len(by_name[(r["file"], head)]) > 1
    r["kernel"] = f"{head}({params})" if clash else head
seen = {}
for r in records.values():
    if seen.setdefault((r["file"], r["arch"], r["kernel"]), r["mangled"]) != r["mangled"]:
        r["kernel"] = demangled[r["mangled"]]  # still ambiguous: the full demangled name

# --- checks ---
def regs_per_block(r):
    # Registers are allocated per warp, 256 at a time (8 per thread).
    warps = -(-r["threads"] // 32)
    return warps * 32 * (-(-r["regs"] // 8) * 8) * r["min_blocks"]

def max_block(r):
    # The largest block (multiple of 32 threads, <= 1024) whose registers fit the register file.
    return min(1024, REGFILE // (32 * (-(-r["regs"] // 8) * 8)) * 32)

fails = []
for r in records.values():
    where = f"{r['file']} {r['kernel']} sm_{r['arch']}"
    if r["threads"] is not None:
        if r["threads"] > 1024:
            fails.append(f"{where}: __launch_bounds__ {r['threads']} threads > 1024")
        elif regs_per_block(r) > REGFILE:
            mb = f" x {r['min_blocks']} blocks/SM" if r["min_blocks"] > 1 else ""
            fails.append(f"{where}: {r['regs']} registers x {r['threads']} threads{mb} = "
                         f"{regs_per_block(r)} allocated > {REGFILE} registers per SM")
    if r["smem"] > SMEM_STATIC:
        fails.append(f"{where}: {r['smem']} bytes static shared memory > {SMEM_STATIC} (48 KiB)")

# --- the document ---
kernels = {}  # (file, kernel) -> {arch: record}
for r in records.values():
    kernels.setdefault((r["file"], r["kernel"]), {})[r["arch"]] = r
def natural(s):
    # <8, ...> before <32, ...>: numbers compare as numbers.
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]
rows = sorted(kernels.items(), key=lambda kv: (natural(kv[0][0]), natural(kv[0][1])))

def per_arch(k, field, fmt=str):
    vals = [k[a][field] if a in k else None for a in archs]
    shown = ["-" if v is None else fmt(v) for v in vals]
    return shown[0] if len(set(shown)) == 1 else " / ".join(shown)

def kib(b):
    return f"{b} B ({b / 1024:.1f} KiB)"

L = []
arch_list = " and ".join("sm_" + a for a in archs)
intro = ("What ptxas reports for every kernel instance in `cuda/kernels/*.cu`, compiled as "
         "`stoke_cuda` is (`-O3 -DNDEBUG -std=c++20 --expt-relaxed-constexpr -DSTOKE_HAS_CUDA=1`) "
         f"for {arch_list} with `-Xptxas -v`. Generated, do not edit: regenerate with "
         "`scripts/kernel-resources.sh --write` and commit. CI's `kernels` stage runs "
         "`scripts/kernel-resources.sh --check`, which fails when a fresh table differs from this "
         "one (a change added spills, registers or kernels) or when a kernel breaks its launch "
         "configuration: its registers (allocated 8 per thread at a time) times its "
         "`__launch_bounds__` threads over the 65536-register file, or static shared memory over "
         "48 KiB.")
L += ["# CUDA kernel resource usage", "",
      textwrap.fill(intro, 100, break_long_words=False, break_on_hyphens=False), "",
      f"nvcc: {nvcc_version}", "",
      "## Summary", ""]
def at_max(rs, key, describe):
    # Every instance at the maximum (ties are common: 128 x 256 and 32 x 1024 fill the same share),
    # the first three by file and kernel named.
    top = key(max(rs, key=key))
    hits = sorted((r for r in rs if key(r) == top),
                  key=lambda r: (natural(r["file"]), natural(r["kernel"]), r["arch"]))
    named = list(dict.fromkeys(describe(r) for r in hits))  # one line per kernel, not per arch
    return top, "; ".join(named[:3]) + (f"; and {len(named) - 3} more" if len(named) > 3 else "")

for a in archs:
    rs = [r for r in records.values() if r["arch"] == a]
    top, named = at_max(rs, lambda r: r["regs"], lambda r: f"`{r['kernel']}`, {r['file']}")
    L.append(f"- sm_{a}: {len(rs)} kernel instances; most registers {top} ({named})")
bounded = [r for r in records.values() if r["threads"] is not None]
if bounded:
    top, named = at_max(bounded, regs_per_block, lambda r: f"{r['regs']} x {r['threads']} threads, "
                        f"`{r['kernel']}`, {r['file']}, sm_{r['arch']}")
    L.append(f"- Fullest register file under `__launch_bounds__`: {top} of {REGFILE} registers "
             f"({named})")
spilled = [(f, k, v) for (f, k), v in rows
           if any(r["spill_st"] or r["spill_ld"] for r in v.values())]
if spilled:
    L.append(f"- Spills ({len(spilled)} kernels; bytes stored / loaded per thread):")
    for f, k, v in spilled:
        L.append(f"  - `{k}` ({f}): " + ", ".join(
            f"sm_{a} {v[a]['spill_st']} / {v[a]['spill_ld']}" for a in archs if a in v))
else:
    L.append("- Spills: none")
stacked = [r for r in records.values() if r["stack"] and not (r["spill_st"] or r["spill_ld"])]
if stacked:
    top, named = at_max(stacked, lambda r: r["stack"], lambda r: f"`{r['kernel']}`, {r['file']}")
    L.append(f"- Stack frames without spills (local arrays): {len(stacked)} instances, largest "
             f"{top} B ({named})")
top, named = at_max(list(records.values()), lambda r: r["smem"],
                    lambda r: f"`{r['kernel']}`, {r['file']}")
dynamic = any("extern __shared__" in open(p, encoding="utf-8", errors="replace").read()
              for p in glob.glob(os.path.join(repo, "cuda", "kernels", "*.cu")))
L.append(f"- Most static shared memory: {kib(top)} ({named}); "
         "limit 48 KiB. " + ("Dynamic shared memory (`extern __shared__`) is not counted"
                             if dynamic else "No kernel uses dynamic shared memory"))
unbounded = [(f, k) for (f, k), v in rows if any(r["threads"] is None for r in v.values())]
if unbounded:
    L.append("- Without `__launch_bounds__` (not checked; the largest block their registers allow):")
    for f, k in unbounded:
        v = kernels[(f, k)]
        L.append(f"  - `{k}` ({f}): " + ", ".join(
            f"sm_{a} {max_block(v[a])} threads" for a in archs if a in v))
if fails:
    L.append(f"- Launch configuration: {len(fails)} FAIL")
    L += [f"  - FAIL {x}" for x in sorted(fails)]
else:
    L.append("- Launch configuration: every bounded kernel's registers fit the 65536-register file "
             "at its `__launch_bounds__`, and static shared memory is within 48 KiB")
L += ["", "## Kernels", "",
      "Threads: `__launch_bounds__` (- for none). Registers per thread; stack frame, spill stores, "
      "spill loads in bytes per thread; static shared memory in bytes per block. `a / b`: "
      f"{' / '.join('sm_' + a for a in archs)} where they differ.", "",
      "| File | Kernel | Threads | " + " | ".join(f"Regs sm_{a}" for a in archs)
      + " | Stack | Spill st | Spill ld | Smem |",
      "|---|---|--:|" + "--:|" * len(archs) + "--:|--:|--:|--:|"]
for (f, k), v in rows:
    regs = [str(v[a]["regs"]) if a in v else "-" for a in archs]
    L.append(f"| {f} | `{k}` | {per_arch(v, 'threads', lambda t: '-' if t is None else str(t))} | "
             + " | ".join(regs) + f" | {per_arch(v, 'stack')} | {per_arch(v, 'spill_st')} | "
             f"{per_arch(v, 'spill_ld')} | {per_arch(v, 'smem')} |")
with open(out, "w") as fh:
    fh.write("\n".join(L) + "\n")

for x in sorted(fails):
    print(f"FAIL: {x}")
n = {a: sum(1 for r in records.values() if r["arch"] == a) for a in archs}
print("kernel-resources: " + ", ".join(f"{n[a]} instances sm_{a}" for a in archs)
      + f", {len(spilled)} kernels with spills, {len(fails)} FAIL", file=sys.stderr)
sys.exit(1 if fails else 0)
PY
((rc == 0 || rc == 1)) || exit "$rc"  # 2: the report could not be read

# Compared from "## Summary" on: the header names the nvcc version, which is not the table.
body() { sed -n '/^## Summary$/,$p' "$1"; }
if [[ $mode == --write ]]; then
  cp "$out" "$repo/$doc"
  echo "kernel-resources: wrote $doc" >&2
else
  if [[ ! -f $repo/$doc ]]; then
    echo "kernel-resources: $doc does not exist; run scripts/kernel-resources.sh --write and commit it" >&2
    exit 1
  fi
  if ! diff -u --label "$doc (committed)" --label "$doc (this tree)" <(body "$repo/$doc") <(body "$out"); then
    committed=$(grep -m1 '^nvcc: ' "$repo/$doc" || true)
    [[ $committed != "nvcc: $nvcc_version" ]] &&
      echo "kernel-resources: note: $doc was generated by ${committed#nvcc: }, this is $nvcc_version" >&2
    echo "kernel-resources: $doc is out of date (above: - committed, + this tree);" \
      "run scripts/kernel-resources.sh --write and commit it" >&2
    exit 1
  fi
  echo "kernel-resources: $doc is up to date" >&2
fi
exit "$rc"
