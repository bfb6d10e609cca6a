#!/usr/bin/env python3
"""One op, one name: checks the file layout rule of docs/design.md ("Where an op lives").

Every backend method in ops/backend_methods.h names its family F. For each family:
  ops/F.h (the API) and ops/F.cpp (checks and dispatch) exist;
  each method of F is defined as CpuBackend::name in ops/cpu/F.cpp or ops/cpu/F_*.cpp, and as
  CudaBackend::name in ops/cuda/F.cpp or ops/cuda/F_*.cpp.
And every file in the op folders is named by a family (F or F_*), or is one of the few shared
pieces listed below with the reason it has no single family.

Run by ctest ("house: ..."); exits non-zero listing every violation.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Shared infrastructure: not an op, or used by several families.
SHARED = {
    # memory_format: the channels_last rule the layers' entry points share
    "ops": {"backend", "backend_methods", "check", "math_mode", "memory_format",
            "profiled_backend"},
    # gemm: linalg and conv2d; gemm_avx512: its own kernel beside it; rows: softmax, loss;
    # transpose: conv2d's layout changes and gemm's transposed operand
    "ops/cpu": {"backend", "gemm", "gemm_avx512", "row_kernels", "transpose"},
    "ops/cuda": {"backend", "glue_util"},
    # sgemm, gemm_tile: the GEMM of linalg (emu) and of conv2d's backward; dispatch: the dtype
    # dispatchers every family's kernels use (made from core/dtype.h's list)
    "cuda/kernels": {"sgemm", "gemm_tile", "dispatch"},
    # autocast: the mixed-precision policy that many families' entry points consult
    "autograd": {"autocast", "engine", "function", "gradcheck", "node", "view_grad"},
    "tests/autograd": {"view"},  # views are Tensor methods (core), their backward autograd's
    "tests/cuda": {"gemm"},  # cuda/kernels/sgemm.cu, shared
}
# Families with an API but no backend method of their own (composed of other ops).
API_ONLY = set()


def families_from_methods():
    text = (ROOT / "ops/backend_methods.h").read_text()
    body = text[text.index("#define STOKE_BACKEND_METHODS"):]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S).replace("\\\n", " ")
    # Each X(ret, name, (params), (args), family): split its balanced parentheses at top-level
    # commas; the name is the second field, the family the last.
    methods = {}
    i = body.find("X(")
    while i >= 0:
        depth, j, fields, start = 0, i + 1, [], i + 2
        while True:
            c = body[j]
            if c in "(<":
                depth += 1
            elif c in ")>":
                depth -= 1
                if depth == 0:
                    fields.append(body[start:j].strip())
                    break
            elif c == "," and depth == 1:
                fields.append(body[start:j].strip())
                start = j + 1
            j += 1
        if len(fields) == 5:
            methods[fields[1]] = fields[4]
        i = body.find("X(", j)
    return methods


def stems(folder, patterns):
    out = []
    for pat in patterns:
        out += [p for p in (ROOT / folder).glob(pat) if p.is_file()]
    return sorted(out)


def named_by_family(stem, families):
    return any(stem == f or stem.startswith(f + "_") for f in families)


def main():
    errors = []
    methods = families_from_methods()
    if len(methods) < 40:
        errors.append(f"ops/backend_methods.h: parsed only {len(methods)} methods (format changed?)")
    families = set(methods.values()) | API_ONLY

    for fam in sorted(families):
        for path in (f"ops/{fam}.h", f"ops/{fam}.cpp"):
            if not (ROOT / path).exists():
                errors.append(f"{path} is missing (family '{fam}')")

    for backend, folder in (("CpuBackend", "ops/cpu"), ("CudaBackend", "ops/cuda")):
        defined = {}
        for path in stems(folder, ["*.cpp"]):
            for m in re.finditer(backend + r"::(\w+)\s*\(", path.read_text()):
                defined.setdefault(m.group(1), []).append(path)
        for name, fam in sorted(methods.items()):
            where = defined.get(name, [])
            if not where:
                errors.append(f"{backend}::{name} (family '{fam}') is defined in no {folder}/*.cpp")
            for path in where:
                if not named_by_family(path.stem, {fam}):
                    errors.append(f"{backend}::{name} is family '{fam}' but defined in "
                                  f"{path.relative_to(ROOT)} (expected {folder}/{fam}[_*].cpp)")

    def check_folder(folder, patterns, strip=lambda s: s):
        shared = SHARED.get(folder, set())
        for path in stems(folder, patterns):
            stem = strip(path.stem)
            if stem in shared or named_by_family(stem, families):
                continue
            errors.append(f"{path.relative_to(ROOT)}: not named by an op family "
                          f"({', '.join(sorted(families))}) nor listed as shared")

    check_folder("ops", ["*.h", "*.cpp"])
    check_folder("ops/cpu", ["*.h", "*.cpp"])
    check_folder("ops/cuda", ["*.h", "*.cpp"])
    check_folder("cuda/kernels", ["*.h", "*.cu"])
    check_folder("autograd", ["*.h", "*.cpp"])
    check_folder("tests/ops", ["test_*.cpp"], lambda s: s[len("test_"):])
    check_folder("tests/autograd", ["test_*_grad.cpp"], lambda s: s[len("test_"):-len("_grad")])
    check_folder("tests/cuda", ["test_kernels_*.cpp"], lambda s: s[len("test_kernels_"):])

    if errors:
        print("one op, one name (docs/design.md): %d violation(s)" % len(errors))
        for e in errors:
            print("  " + e)
        return 1
    print(f"one op, one name: {len(methods)} backend methods in {len(families)} families, "
          "every file named by its family")
    return 0


if __name__ == "__main__":
    sys.exit(main())
