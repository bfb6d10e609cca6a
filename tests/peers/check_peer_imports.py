#!/usr/bin/env python3
"""Every module that a PyTorch peer (bench/*.py) or the fixture generator (tests/fixtures/*.py)
imports is installed: scripts/install-deps.sh must install it, or a benchmark's peer fails on a
fresh machine ("No module named 'PIL'"). Modules of the scripts' own folders are skipped, and
so are imports inside a `try` that handles ImportError (optional ones, used when present).

Exit 0 when all import, 1 naming the missing ones (and the script that wants each), 77 (skipped)
when torch itself is absent: install-deps.sh --no-torch leaves the peers out on purpose.
"""
import ast
import importlib
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
scripts = sorted((root / "bench").glob("*.py")) + sorted((root / "tests" / "fixtures").glob("*.py"))
local = {p.stem for p in scripts}

wanted = {}  # top-level module -> scripts importing it


class Imports(ast.NodeVisitor):
    def __init__(self, script):
        self.script = script

    def visit_Try(self, node):
        optional = any(
            h.type is None
            or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception")
                   for n in ast.walk(h.type))
            for h in node.handlers)
        if not optional:
            for child in node.body:
                self.visit(child)
        for child in node.handlers + node.orelse + node.finalbody:
            self.visit(child)

    def visit_Import(self, node):
        for alias in node.names:
            self.want(alias.name)

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module:
            self.want(node.module)

    def want(self, name):
        top = name.split(".")[0]
        if top not in local:
            wanted.setdefault(top, []).append(self.script.relative_to(root).as_posix())


for script in scripts:
    Imports(script).visit(ast.parse(script.read_text(), filename=str(script)))

try:
    importlib.import_module("torch")
except ImportError:
    print("skipped: torch is not installed (scripts/install-deps.sh --no-torch)")
    sys.exit(77)

missing = []
for module in sorted(wanted):
    try:
        importlib.import_module(module)
    except ImportError as e:
        missing.append(f"{module} ({e}), imported by {', '.join(sorted(set(wanted[module])))}")
print(f"{len(wanted)} modules imported by {len(scripts)} peer scripts")
if missing:
    print("missing (add their Debian packages to scripts/install-deps.sh):\n  " + "\n  ".join(missing))
    sys.exit(1)
print("all installed")
