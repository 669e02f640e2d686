#!/usr/bin/env python3
"""No circle of imports among a Python package's modules.

usage: check_py_imports.py PACKAGE_DIR...   (prints TAP)

Every import of a sibling module counts, the ones inside functions too
(`from . import x`, `from .x import y`, `from <package> import x`,
`import <package>.x`): an import put inside a function to break a circle
still ties the two modules. A package's modules stand in layers (docs/te.md
for tools/te/fattn_te: where, tex_enums and bridge at the bottom, the
commands on top); a circle fails with the modules on it. The checker first
checks itself on a synthetic package.
"""
import ast
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)


def imports(path, package, siblings):
    """The sibling modules a module imports, anywhere in it."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            if n.level == 1 and n.module:
                out.add(n.module.split(".")[0])
            elif (n.level == 1 and not n.module) or n.module == package:
                out.update(a.name for a in n.names)
            elif n.module and n.module.startswith(package + "."):
                out.add(n.module.split(".")[1])
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.startswith(package + "."):
                    out.add(a.name.split(".")[1])
    return out & siblings


def graph(pkg_dir):
    package = os.path.basename(os.path.normpath(pkg_dir))
    mods = {f[:-3]: os.path.join(pkg_dir, f) for f in os.listdir(pkg_dir)
            if f.endswith(".py") and f != "__init__.py"}
    return {m: imports(p, package, set(mods)) - {m} for m, p in mods.items()}


def circles(g):
    """Each strongly connected set of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def self_test():
    with tempfile.TemporaryDirectory() as d:
        pkg = os.path.join(d, "pkg")
        os.mkdir(pkg)
        files = {"a.py": "from . import b\n", "b.py": "def f():\n    from pkg import c\n",
                 "c.py": "import pkg.a\n", "d.py": "from .a import x\n", "e.py": ""}
        for name, text in files.items():
            with open(os.path.join(pkg, name), "w") as f:
                f.write(text)
        got = circles(graph(pkg))
        if got != [["a", "b", "c"]]:
            raise AssertionError("circles of a synthetic package: %r" % got)


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    tests = tap.Tests()
    tests.case("self-test: a circle through a function's import is found")(self_test)
    for pkg in argv[1:]:
        g = graph(pkg)

        @tests.case("%s: %d modules, no circle of imports" % (pkg, len(g)))
        def acyclic(g=g):
            found = circles(g)
            if found:
                raise AssertionError("\n".join(
                    "circle: " + " <-> ".join(c) + " (" + "; ".join(
                        "%s imports %s" % (m, ", ".join(sorted(g[m] & set(c)))) for m in c) + ")"
                    for c in found))
    return 1 if tap.run(tests) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
