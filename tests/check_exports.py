#!/usr/bin/env python3
"""libfattn's exports are exactly what its public headers promise.

usage: check_exports.py INCLUDE_DIR LIBFATTN_SO LIBFATTN_INTERNAL_A TESTING   (prints TAP)

INCLUDE_DIR is lib/include/fattn; TESTING is 1 in a -Dtesting build (which
installs fattn/testing.h and builds its entry point), else 0.

  - Every function or variable a public header declares carries FATTN_API
    (fattn/api.h), and every FATTN_API declaration names a fattn_ symbol.
  - `nm -D --defined-only LIBFATTN_SO` lists exactly those names: nothing
    internal leaks (libfattn is built with hidden visibility), and nothing
    promised is missing.
  - Every global symbol the internal static library defines is either one of
    them or an internal name, fattn__<module>_<action>
    (docs/architecture.md, "Public and internal names").

Names the toolchain makes (a leading underscore: reserved to the
implementation, never fattn's) are left out of the comparison. The checker
first runs itself on synthetic headers and symbol lists, so that each check
is seen to fail on what it must catch.
"""
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

API = "FATTN_API"
# Installed only with -Dtesting (lib/meson.build), so promised only then.
TESTING_HEADERS = ("testing.h",)
INTERNAL_PREFIX = "fattn__"
PUBLIC_PREFIX = "fattn_"


def strip_c(src):
    """The text without comments, string literals' contents or preprocessor
    lines (continuations included)."""
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    src = re.sub(r'"(\\.|[^"\\])*"', '""', src)
    out, cont = [], False
    for line in src.split("\n"):
        pre = cont or line.lstrip().startswith("#")
        cont = pre and line.rstrip().endswith("\\")
        out.append("" if pre else line)
    return "\n".join(out)


def top_level_statements(code):
    """The statements at brace depth 0 that end with ';' (prototypes,
    variable declarations, typedefs with their struct bodies). `extern "C"
    {` does not count as a level; a function body ends its definition,
    which is no statement."""
    code = code.replace('extern ""', "")  # what is left of extern "C"
    stmts, depth, start, head = [], 0, 0, ""
    blocks = []  # for each open brace: did it open a C++ linkage block?
    for i, ch in enumerate(code):
        if ch == "{":
            linkage = depth == 0 and code[start:i].strip() == ""
            blocks.append(linkage)
            if linkage:
                start = i + 1
                continue
            if depth == 0:
                head = code[start:i]
            depth += 1
        elif ch == "}":
            if blocks.pop():
                start = i + 1
                continue
            depth -= 1
            if depth == 0 and "(" in head and "=" not in head:
                start = i + 1  # a function's body: a definition, not a declaration
        elif ch == ";" and depth == 0:
            stmts.append(code[start:i].strip())
            start = i + 1
    return stmts


def declared_name(stmt):
    """The name a top-level declaration declares, or None for one that
    declares no symbol (typedef, static, a struct's tail)."""
    s = " ".join(stmt.split())
    if not s or re.match(r"(typedef|static)\b", s):
        return None
    s = re.sub(r"\{.*\}", " ", s)  # a struct's or enum's body
    if re.fullmatch(r"(struct|union|enum)(\s+\w+)?\s*", s):
        return None  # a type's definition declares no symbol
    if "(" in s:
        m = re.match(r"[^(]*?\b([A-Za-z_]\w*)\s*\(", s)
        if m and not re.search(r"\(\s*\*", s[:s.index("(") + 3]):
            return m.group(1)
        return None
    m = re.search(r"\b([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*(=.*)?$", s)
    return m.group(1) if m else None


def header_declarations(text):
    """(name, has FATTN_API) for every symbol a header declares."""
    out = []
    for stmt in top_level_statements(strip_c(text)):
        name = declared_name(stmt)
        if name:
            out.append((name, re.search(r"\b%s\b" % API, stmt) is not None))
    return out


def public_names(include_dir, testing):
    """The names the public headers promise, and the problems with how they
    are declared."""
    names, problems = set(), []
    for fn in sorted(os.listdir(include_dir)):
        if not fn.endswith(".h") or (fn in TESTING_HEADERS and not testing):
            continue
        with open(os.path.join(include_dir, fn)) as f:
            decls = header_declarations(f.read())
        for name, api in decls:
            if not api:
                problems.append("fattn/%s: %s is declared without %s" % (fn, name, API))
            elif not name.startswith(PUBLIC_PREFIX) or name.startswith(INTERNAL_PREFIX):
                problems.append("fattn/%s: %s: %s on a name that is not fattn_<module>_..."
                                % (fn, name, API))
            else:
                names.add(name)
    return names, problems


def nm_names(args):
    """Defined global symbol names nm lists for args (its stdout lines end
    in the name); names starting with '_' are the toolchain's."""
    out = subprocess.run(["nm"] + args, check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.endswith(":") and len(parts[-2]) == 1:
            name = parts[-1].split("@")[0]
            if not name.startswith("_"):
                names.add(name)
    return names


def compare_exports(exported, promised):
    """Problems of a shared library exporting `exported` for headers
    promising `promised`."""
    problems = ["exported but not declared in a public header: %s" % n
                for n in sorted(exported - promised)]
    problems += ["declared in a public header but not exported: %s" % n
                 for n in sorted(promised - exported)]
    return problems


def check_internal(defined, promised):
    """Problems of a static library defining `defined`: each is public or
    fattn__."""
    return ["%s is neither declared in a public header nor named %s<module>_<action>"
            % (n, INTERNAL_PREFIX)
            for n in sorted(defined)
            if n not in promised and not n.startswith(INTERNAL_PREFIX)]


def fail_if(problems):
    if problems:
        raise AssertionError("\n".join(problems))


# ---- the checker on synthetic input ------------------------------------------

SYNTH_HEADER = '''/* fattn/x.h: fattn_in_comment(void); */
#ifndef X_H
#define X_H
#define FATTN_X(a) fattn_macro(a)
#ifdef __cplusplus
extern "C" {
#endif
typedef struct fattn_x { int (*cb)(int); int n; } fattn_x;
typedef int (*fattn_x_fn)(int);
struct fattn_x_impl { int n; };
enum { FATTN_X_COUNT = 3 };
FATTN_API int fattn_x_init(fattn_x *x,
                           int n);
FATTN_API const char *fattn_x_name(int i);
int fattn_x_forgotten(void);
FATTN_API extern const int fattn_x_table[4];
static inline int fattn_x_inline(int a) { return a + 1; }
FATTN_API void cg_not_public(void);
#ifdef __cplusplus
}
#endif
#endif
'''


def self_test_header():
    got = sorted(header_declarations(SYNTH_HEADER))
    want = sorted([("fattn_x_init", True), ("fattn_x_name", True),
                   ("fattn_x_forgotten", False), ("fattn_x_table", True),
                   ("cg_not_public", True)])
    if got != want:
        raise AssertionError("declarations: got %r, want %r" % (got, want))


def self_test_compare():
    p = compare_exports({"fattn_a", "fattn_b", "fattn__c"}, {"fattn_a", "fattn_d"})
    want = ["exported but not declared in a public header: fattn__c",
            "exported but not declared in a public header: fattn_b",
            "declared in a public header but not exported: fattn_d"]
    if p != want:
        raise AssertionError("compare_exports: got %r, want %r" % (p, want))
    if compare_exports({"fattn_a"}, {"fattn_a"}):
        raise AssertionError("compare_exports reported equal lists")
    p = check_internal({"fattn_a", "fattn__b", "cpu_forward", "fattn_geom_init"}, {"fattn_a"})
    if [x.split()[0] for x in p] != ["cpu_forward", "fattn_geom_init"]:
        raise AssertionError("check_internal: %r" % p)


def main(argv):
    if len(argv) != 5:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    include_dir, so, internal_a, testing = argv[1], argv[2], argv[3], argv[4] == "1"
    tests = tap.Tests()
    tests.case("self-test: declarations found in a synthetic header")(self_test_header)
    tests.case("self-test: differences between symbol lists reported")(self_test_compare)
    promised, problems = public_names(include_dir, testing)

    @tests.case("public headers: every declaration carries FATTN_API (%d names)" % len(promised))
    def headers():
        fail_if(problems)
        if len(promised) < 100:
            raise AssertionError("only %d public names found: the header parser lost some"
                                 % len(promised))

    @tests.case("nm -D --defined-only %s: exactly the public headers' names"
                % os.path.basename(so))
    def exports():
        fail_if(compare_exports(nm_names(["-D", "--defined-only", so]), promised))

    @tests.case("%s: every global symbol public or fattn__" % os.path.basename(internal_a))
    def internal():
        defined = nm_names(["-g", "--defined-only", internal_a])
        if not any(n.startswith(INTERNAL_PREFIX) for n in defined):
            raise AssertionError("no fattn__ symbol in %s: not libfattn's objects?" % internal_a)
        fail_if(check_internal(defined, promised))

    return 1 if tap.run(tests) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
