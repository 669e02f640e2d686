#!/usr/bin/env python3
"""Enforce the architecture's limits on lib/ and harness/ (docs/architecture.md).

usage: check_structure.py [--self-test-only] ROOT   (prints TAP)
       check_structure.py --list ROOT               (violations only, one a line)

Rules, each violation reported as `file:line: rule: detail`:

  file-length         no file in lib/ or harness/ over MAX_FILE_LINES lines
  function-length     no C function over MAX_FUNCTION_LINES lines, counted from
                      the line of its opening brace to the line of its closing
                      brace, both included. The code base puts both braces of
                      a function definition alone at column 0 (or writes the
                      whole function on one line); a function that does
                      neither is reported too, so that the style the count
                      relies on holds.
  engine-name         no engine name ("cpu", "cudnn") compared as a string
                      (str[n][case]cmp with such a literal) outside
                      REGISTRY_FILE: engines are objects, and the registry is
                      the one place that maps names to them
  engine-string       no string literal that is an engine name ("cpu",
                      "cudnn") outside REGISTRY_FILE, but an engine's own name
                      in its ops (ENGINE_NAME_OWNERS) and the few uses
                      ENGINE_STRING_ALLOWED gives a reason for: callers hold
                      engine objects and ask them (fattn_engine_supports)
  getenv              no getenv anywhere in lib/: libraries take everything
                      as arguments (the CLI reads the environment), but the
                      -Dtesting hook (GETENV_ALLOWED)
  cudnn-includes-cpu  nothing under lib/cudnn/ includes a header from lib/cpu/
  print               the printf family, puts, fputs and perror only in
                      harness/cli/cmd_*.c and harness/cli/fattn.c: libraries
                      return errors as values and never print
  harness-folder      every C file of harness/ lives in one of its folders
                      (HARNESS_FLOORS)
  harness-layers      a harness file includes harness headers of its own
                      folder or of a folder on a lower floor only
                      (HARNESS_FLOORS: model/ and files/ at the bottom and
                      apart, then run/, check/, cli/), so that no arrow goes
                      back up between folders
  harness-defined     a function a harness header declares is defined in a
                      file of that header's folder (no room declares what
                      another room defines)
  error-idiom         lib/ and harness/ have one way to pass an error on: a
                      status is tested with `!= FATTN_OK` and then returned or
                      sent to the cleanup label; no status variable `st` is
                      tested `== FATTN_OK` to guard the next step (`if (st ==
                      FATTN_OK) st = ...` chains, `st == FATTN_OK &&` conditions
                      and loops), but in the functions ERROR_IDIOM_ALLOWED names
                      with a reason; no status is tested for truth (`if (st)`,
                      `if ((st = f()))`, `(st = f()) || ...`: compare it, `!=
                      FATTN_OK`); and the one goto label is `out`
  harness-prefix      no name harness/ declares or defines (function, type,
                      struct/enum/union tag, enum constant, macro, global)
                      takes the public API's prefix fattn_ / FATTN_ (nor the
                      library internals' fattn__): the harness's own are
                      fh_ / FH_; a name lib/include/fattn/ declares is public
                      and may be repeated

First the checker checks itself on a table of synthetic files (SELF_TESTS),
each written to a temporary directory: every rule must catch what it is meant
to catch and pass what it is meant to pass. Then one TAP test per rule over
the tree at ROOT. The violations the tree is known to have are listed once, in
KNOWN_VIOLATIONS: a rule whose violations are all known is reported as
`not ok ... # TODO` with every violation printed, so it shows without failing;
a violation not in the list fails. An entry that no longer matches anything is
printed so that it can be deleted; when the list is empty every rule is
enforced.
"""
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

# ---- the limits and the one place each is allowed to be broken -------------

MAX_FILE_LINES = 900
MAX_FUNCTION_LINES = 120
# The engine registry: the only file that may compare an engine name.
REGISTRY_FILE = "lib/core/registry.c"
ENGINE_NAMES = ("cpu", "cudnn")
SCANNED_DIRS = ("lib", "harness")
NO_GETENV_DIRS = ("lib",)
# getenv in lib/ where it is allowed, and why.
GETENV_ALLOWED = {
    "lib/core/testing.c": "the fault-injection and row-lifting hooks, built only with -Dtesting",
}
# An engine's name as a string: its own ops name it once, and a few places
# use the word for something else.
ENGINE_NAME_OWNERS = {"lib/cpu/engine.c": "cpu", "lib/cudnn/engine.c": "cudnn"}
ENGINE_STRING_ALLOWED = {
    "harness/run/runfile.c": "the `device` provenance of a host run is the word cpu",
}
PRINT_ALLOWED = re.compile(r"^harness/cli/(cmd_[^/]*\.c|fattn\.c)$")
# harness/'s folders and their floors: a folder may use its own headers and
# those of folders on lower floors; folders on one floor know nothing of
# each other (docs/architecture.md, "The layers").
HARNESS_FLOORS = {"model": 0, "files": 0, "run": 1, "check": 2, "cli": 3}
# the error idiom's folders, and where a status may still guard a step, and
# why (the function also says so in a comment). A harness step that must run
# after a failure takes the status so far and keeps it (schedule_run.c's mb_end).
ERROR_IDIOM_DIRS = ("lib", "harness")
ERROR_IDIOM_ALLOWED = {
    ("lib/cudnn/plan_store.c", "fattn__ps_write_atomic"):
        "the file is closed even after a failed write, and the first error is reported",
}
ERROR_LABEL = "out"
PRINT_FUNCTIONS = ("printf", "fprintf", "vprintf", "vfprintf", "puts", "fputs", "perror")
C_SUFFIXES = (".c", ".h")

# Violations allowed for now (none: every rule is enforced). An entry
# is (rule, file) or, for function-length and cudnn-includes-cpu, (rule, file,
# function or included path), so that a new violation in a known file fails.
KNOWN_VIOLATIONS = []

RULES = ("file-length", "function-length", "engine-name", "engine-string", "getenv",
         "cudnn-includes-cpu", "print", "harness-folder", "harness-layers", "harness-defined",
         "error-idiom", "harness-prefix")


class Violation:
    def __init__(self, rule, path, line, detail, name=None):
        self.rule, self.path, self.line, self.detail, self.name = rule, path, line, detail, name

    def key(self):
        """The KNOWN_VIOLATIONS entry that covers this violation."""
        if self.name is not None:
            return (self.rule, self.path, self.name)
        return (self.rule, self.path)

    def __str__(self):
        return "%s:%d: %s: %s" % (self.path, self.line, self.rule, self.detail)


# ---- reading C: comments, literals and preprocessor lines blanked -----------

def strip_comments(src):
    """src with every comment replaced by spaces (newlines kept, so line
    numbers hold); string and character literals are left as they are."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "/" and src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = literal_end(src, i)
            out.append(src[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def literal_end(src, i):
    """Index just past the string or character literal that starts at src[i]."""
    quote, j, n = src[i], i + 1, len(src)
    while j < n and src[j] != quote and src[j] != "\n":
        j += 2 if src[j] == "\\" else 1
    return min(j + 1, n)


def blank_literals(code):
    """code (comments already stripped) with the inside of every string and
    character literal replaced by spaces, so that no brace, parenthesis or
    name inside one is seen."""
    out = []
    i, n = 0, len(code)
    while i < n:
        if code[i] in "\"'":
            j = literal_end(code, i)
            out.append(code[i] + " " * max(j - i - 2, 0) + (code[j - 1] if j - i >= 2 else ""))
            i = j
        else:
            out.append(code[i])
            i += 1
    return "".join(out)


def blank_preprocessor(code):
    """code with every preprocessor line (and its continuations) blanked."""
    lines = code.split("\n")
    cont = False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith("#"):
            cont = line.endswith("\\")
            lines[k] = " " * len(line)
    return "\n".join(lines)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


# ---- the rules ----------------------------------------------------------------

def check_file_length(rel, src):
    n = len(src.splitlines())
    if n > MAX_FILE_LINES:
        return [Violation("file-length", rel, n, "%d lines (limit %d)" % (n, MAX_FILE_LINES))]
    return []


def functions(code):
    """(name, open line, close line, braces at column 0) of every function
    definition in code (comments, literals and preprocessor lines blanked).
    A top-level brace opens a function when the text since the previous
    top-level `;` or `}` ends in `)` and holds no `=` (an initializer)."""
    found = []
    lines = code.split("\n")
    depth, head_start, start, extern_c = 0, 0, None, 0
    for pos, c in enumerate(code):
        if c == "{":
            if depth == 0 and start is None:
                head = code[head_start:pos]
                if re.fullmatch(r'\s*extern\s*"\s*"\s*', head):
                    extern_c += 1  # extern "C" { ... }: its contents are top level
                    head_start = pos + 1
                    continue
                if head.rstrip().endswith(")") and "=" not in head:
                    start = (pos, head)
            depth += 1
        elif c == "}":
            if depth == 0 and extern_c:
                extern_c -= 1
                head_start = pos + 1
                continue
            depth -= 1
            if depth == 0:
                if start is not None:
                    open_pos, head = start
                    names = [n for n in re.findall(r"(\w+)\s*\(", head)
                             if n not in ("__attribute__", "__declspec", "alignas")]
                    lo, hi = line_of(code, open_pos), line_of(code, pos)
                    col0 = lines[lo - 1].strip() == "{" and lines[lo - 1].startswith("{") and \
                        lines[hi - 1].startswith("}")
                    found.append((names[0] if names else "?", lo, hi, col0))
                    start = None
                head_start = pos + 1
        elif c == ";" and depth == 0:
            head_start = pos + 1
    return found


def check_function_length(rel, code):
    out = []
    for name, lo, hi, col0 in functions(code):
        n = hi - lo + 1
        if not col0 and hi > lo:
            out.append(Violation("function-length", rel, lo,
                                 "%s: braces not alone at column 0" % name,
                                 name))
        elif n > MAX_FUNCTION_LINES:
            out.append(Violation("function-length", rel, lo, "%s: %d lines (limit %d)" % (
                name, n, MAX_FUNCTION_LINES), name))
    return out


def call_args(code, open_paren):
    """The text between the parenthesis at code[open_paren] and its match;
    code has comments stripped and literals intact."""
    depth, i, n = 0, open_paren, len(code)
    while i < n:
        c = code[i]
        if c in "\"'":
            i = literal_end(code, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return code[open_paren + 1:i]
        i += 1
    return code[open_paren + 1:]


def check_engine_name(rel, code, blanked):
    if rel == REGISTRY_FILE:
        return []
    out = []
    for m in re.finditer(r"\b(str(?:n)?(?:case)?cmp)\s*\(", blanked):
        args = call_args(code, m.end() - 1)
        for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', args):
            if lit in ENGINE_NAMES:
                out.append(Violation("engine-name", rel, line_of(code, m.start()),
                                     '%s with "%s" outside %s' % (m.group(1), lit, REGISTRY_FILE)))
    return out


def check_engine_string(rel, code):
    if rel == REGISTRY_FILE or rel in ENGINE_STRING_ALLOWED:
        return []
    out = []
    for m in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', code):
        lit = m.group(1)
        if lit not in ENGINE_NAMES or ENGINE_NAME_OWNERS.get(rel) == lit:
            continue
        out.append(Violation("engine-string", rel, line_of(code, m.start()),
                             '"%s" outside %s' % (lit, REGISTRY_FILE)))
    return out


def check_getenv(rel, blanked):
    if not any(rel.startswith(d + "/") for d in NO_GETENV_DIRS) or rel in GETENV_ALLOWED:
        return []
    return [Violation("getenv", rel, line_of(blanked, m.start()),
                      "%s in a library" % m.group(1))
            for m in re.finditer(r"\b((?:secure_)?getenv)\s*\(", blanked)]


def check_cudnn_includes_cpu(rel, code):
    if not rel.startswith("lib/cudnn/"):
        return []
    out = []
    here = os.path.dirname(rel)
    for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', code, re.M):
        inc = m.group(1)
        # the include path holds the file's own directory and lib/ (lib/meson.build)
        seen_as = [os.path.normpath(os.path.join(d, inc)) for d in (here, "lib")]
        if any(p.startswith("lib/cpu/") for p in seen_as):
            out.append(Violation("cudnn-includes-cpu", rel, line_of(code, m.start()),
                                 "includes %s from lib/cpu/" % inc, inc))
    return out


def check_print(rel, blanked):
    if PRINT_ALLOWED.match(rel):
        return []
    pat = r"\b(%s)\s*\(" % "|".join(PRINT_FUNCTIONS)
    return [Violation("print", rel, line_of(blanked, m.start()),
                      "%s outside harness/cli/cmd_*.c and harness/cli/fattn.c" % m.group(1))
            for m in re.finditer(pat, blanked)]


def paren_end(code, i):
    """Index of the parenthesis that closes the one at code[i] (literals
    already blanked)."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "(":
            depth += 1
        elif code[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def enclosing_function(funcs, line):
    for name, lo, hi, _ in funcs:
        if lo <= line <= hi:
            return name
    return None


def check_error_idiom(rel, blanked):
    """blanked: comments, literals and preprocessor lines blanked."""
    if not any(rel.startswith(d + "/") for d in ERROR_IDIOM_DIRS):
        return []
    out, funcs = [], functions(blanked)
    # a local status `st` (not a builder's sticky `b->st` or `b.st`) tested
    # equal to FATTN_OK, written either way round
    guard = r"(?<![\w.>])st\s*==\s*FATTN_OK\b|\bFATTN_OK\s*==\s*st\b(?!\s*(?:->|\.))" \
        r"|\((?<![\w.>])st\s*=[^;=][^;]*?\)\s*==\s*FATTN_OK\b"
    for m in re.finditer(guard, blanked):
        line = line_of(blanked, m.start())
        fn_name = enclosing_function(funcs, line)
        if (rel, fn_name) in ERROR_IDIOM_ALLOWED:
            continue
        out.append(Violation("error-idiom", rel, line, "%s: `st == FATTN_OK` guards a step "
                             "(return early, or goto %s)" % (fn_name, ERROR_LABEL), fn_name))
    # the status is compared, never tested for truth: `if (st)`, `if (!st)`,
    # `if ((st = f()))`, `(st = f()) || ...`
    truth = [m.start() for m in re.finditer(r"\b(?:if|while)\s*\(\s*!?\s*st\s*\)", blanked)]
    for m in re.finditer(r"\((?<![\w.>])st\s*=(?!=)", blanked):
        end = paren_end(blanked, m.start())
        if not re.match(r"\s*[!=]=", blanked[end + 1:]):
            truth.append(m.start())
    for pos in sorted(truth):
        line = line_of(blanked, pos)
        fn_name = enclosing_function(funcs, line)
        out.append(Violation("error-idiom", rel, line, "%s: the status tested for truth "
                             "(compare it: != FATTN_OK)" % fn_name, fn_name))
    for m in re.finditer(r"^[ \t]*([A-Za-z_]\w*)[ \t]*:(?!:)", blanked, re.M):
        if m.group(1) in ("default", ERROR_LABEL):
            continue
        line = line_of(blanked, m.start())
        prev = blanked[:m.start()].rstrip()
        if prev.endswith("?"):
            continue  # the `b : c` of a conditional on its own line
        out.append(Violation("error-idiom", rel, line, "label %s: (the cleanup label is %s:)"
                             % (m.group(1), ERROR_LABEL), enclosing_function(funcs, line)))
    for m in re.finditer(r"\bgoto\s+(\w+)", blanked):
        if m.group(1) != ERROR_LABEL:
            line = line_of(blanked, m.start())
            out.append(Violation("error-idiom", rel, line, "goto %s (the cleanup label is %s:)"
                                 % (m.group(1), ERROR_LABEL), enclosing_function(funcs, line)))
    return out


def check_source(rel, src):
    """Every violation in one file; rel is its path from the root, with /."""
    out = check_file_length(rel, src)
    if not rel.endswith(C_SUFFIXES):
        return out
    code = strip_comments(src)
    blanked = blank_literals(code)
    out += check_function_length(rel, blank_preprocessor(blanked))
    out += check_engine_name(rel, code, blanked)
    out += check_engine_string(rel, code)
    out += check_getenv(rel, blanked)
    out += check_cudnn_includes_cpu(rel, code)
    out += check_print(rel, blanked)
    out += check_error_idiom(rel, blank_preprocessor(blanked))
    return out


def harness_folder(rel):
    """The harness folder of rel ("" for a file directly in harness/), or
    None outside harness/."""
    parts = rel.split("/")
    if parts[0] != "harness":
        return None
    return parts[1] if len(parts) > 2 else ""


DECLARED_FN = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*;", re.M)
DEFINED_FN = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*\n\{", re.M)

# What a harness file declares or defines by name (code with comments
# stripped and literals blanked), for harness-prefix: functions (declared or
# defined), macros, struct/enum/union tags, typedef names (a function pointer's
# too), enum constants, and variables at file scope.
PUBLIC_PREFIX = re.compile(r"(?:fattn|FATTN)_")
DECLARES = (
    re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*[;{\n]", re.M),
    re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M),
    re.compile(r"\b(?:struct|enum|union)[ \t]+(\w+)\s*\{"),
    re.compile(r"^\}[ \t]*(\w+)[ \t]*(?:\[[^\]]*\])?[ \t]*;", re.M),
    re.compile(r"\btypedef\b[^;{]*?\(\s*\*\s*(\w+)\s*\)"),
    re.compile(r"\btypedef\b[^;{(]*?\b(\w+)\s*(?:\[[^\]]*\]\s*)*;"),
    re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*(?:\[[^\]]*\]\s*)*(?:=|;)", re.M),
)
ENUM_BODY = re.compile(r"\benum\b[^;{]*\{([^}]*)\}")
# a family of names a macro makes by pasting (`FATTN_ROW_##name`); the bare
# `fattn_##x` makes public names (a codec's fattn_<codec>_name)
PASTED = re.compile(r"\b((?:fattn|FATTN)_\w+)\s*##")


def harness_declared_names(code):
    """(name, position) of every name code declares or defines."""
    out = []
    flat = blank_literals(code)
    for pat in DECLARES:
        out += [(m.group(1), m.start(1)) for m in pat.finditer(flat)]
    out += [(m.group(1), m.start(1)) for m in PASTED.finditer(flat)]
    for body in ENUM_BODY.finditer(blank_preprocessor(flat)):
        # a constant opens the body, follows a comma, or follows an X-macro
        # table's expansion (`X_TABLE(X_ENUM) X_COUNT`)
        for m in re.finditer(r"(?:^|,|\))\s*([A-Za-z_]\w*)", body.group(1)):
            out.append((m.group(1), body.start(1) + m.start(1)))
    return out


def check_harness_prefix(rel, code, public):
    out, seen = [], set()
    for name, pos in sorted(harness_declared_names(code), key=lambda x: x[1]):
        if not PUBLIC_PREFIX.match(name) or name in public or name in seen:
            continue
        if name.endswith("_") and any(p.startswith(name) for p in public):
            continue  # a pasted family of public names
        seen.add(name)
        new = ("fh_" if name.startswith("fattn") else "FH_") + name[6:].lstrip("_")
        out.append(Violation("harness-prefix", rel, line_of(code, pos),
                             "%s: fattn_ / FATTN_ is the public API's prefix, a harness "
                             "name is fh_ / FH_ (%s)" % (name, new), name))
    return out


def public_names(root):
    """Every fattn_ / FATTN_ name the public headers spell."""
    names = set()
    for d, dirs, files in os.walk(os.path.join(root, "lib", "include")):
        for f in files:
            if f.endswith(".h"):
                with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
                    names |= set(re.findall(r"\b(?:fattn|FATTN)_\w+", fh.read()))
    return names


def check_harness(sources, public=frozenset()):
    """The folder rules and the prefix over every C file of harness/ at
    once; sources maps a path from the root to its text (comments stripped),
    public holds the public headers' names."""
    out, header_folder, declared = [], {}, {}
    for rel, code in sources.items():
        folder = harness_folder(rel)
        if folder is None:
            continue
        if folder not in HARNESS_FLOORS:
            out.append(Violation("harness-folder", rel, 1, "not in one of harness/'s folders "
                                 "(%s)" % ", ".join(sorted(HARNESS_FLOORS))))
            continue
        if rel.endswith(".h"):
            header_folder[os.path.basename(rel)] = folder
            for m in DECLARED_FN.finditer(blank_literals(code)):
                declared.setdefault(m.group(1), folder)
    for rel, code in sorted(sources.items()):
        folder = harness_folder(rel)
        if folder not in HARNESS_FLOORS:
            continue
        for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', code, re.M):
            inc = m.group(1)
            other = inc.split("/")[0] if "/" in inc else header_folder.get(inc)
            if other not in HARNESS_FLOORS or other == folder or \
                    HARNESS_FLOORS[other] < HARNESS_FLOORS[folder]:
                continue
            out.append(Violation("harness-layers", rel, line_of(code, m.start()),
                                 "%s/ includes %s of %s/ (floor %d over %d)" % (
                                     folder, inc, other, HARNESS_FLOORS[other],
                                     HARNESS_FLOORS[folder]), inc))
        out += check_harness_prefix(rel, code, public)
        if rel.endswith(".c"):
            for m in DEFINED_FN.finditer(blank_preprocessor(blank_literals(code))):
                home = declared.get(m.group(1))
                if home is not None and home != folder:
                    out.append(Violation("harness-defined", rel, line_of(code, m.start()),
                                         "%s is declared in %s/ and defined in %s/" % (
                                             m.group(1), home, folder), m.group(1)))
    return out


def check_tree(root):
    out, harness, templates = [], {}, {}
    for top in SCANNED_DIRS:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as fh:
                    src = fh.read()
                out += check_source(rel, src)
                if rel.startswith("harness/") and rel.endswith(C_SUFFIXES):
                    harness[rel] = strip_comments(src)
                elif rel.startswith("harness/") and rel.endswith(".h.in"):
                    templates[rel] = strip_comments(src)
    public = public_names(root)
    # a header meson configures is C once made: its names follow the prefix
    # rule, though it stands outside the folders
    for rel, code in sorted(templates.items()):
        out += check_harness_prefix(rel, code, public)
    return out + check_harness(harness, public)


def classify(violations, known):
    """rule -> (unknown violations, known violations, stale entries)."""
    known = set(known)
    used = set()
    res = {r: ([], [], []) for r in RULES}
    for v in violations:
        if v.key() in known:
            res[v.rule][1].append(v)
            used.add(v.key())
        else:
            res[v.rule][0].append(v)
    for k in sorted(known - used):
        res[k[0]][2].append(k)
    return res


# ---- the checker's own table ---------------------------------------------------

def fn(name, body_lines, sig="static int %s(void)"):
    """A function whose braces are alone at column 0 and that spans
    body_lines + 2 lines, braces included."""
    return (sig % name) + "\n{\n" + "    x++;\n" * body_lines + "}\n"


LONG_FILE = "int x;\n" * MAX_FILE_LINES

# (name, path, content, rule, number of violations of that rule expected[,
#  the start every such violation's detail must have])
SELF_TESTS = [
    ("a file of exactly the limit passes", "lib/core/a.c", LONG_FILE, "file-length", 0),
    ("a file one line over is caught", "harness/a.c", LONG_FILE + "int y;\n", "file-length", 1),
    ("a long file outside lib/ and harness/ is not scanned", "tests/a.c", LONG_FILE * 2,
     "file-length", 0),
    ("a function of exactly the limit passes", "lib/cpu/f.c",
     "int x;\n" + fn("f", MAX_FUNCTION_LINES - 2), "function-length", 0),
    ("a function one line over is caught", "lib/cpu/f.c",
     "int x;\n" + fn("f", MAX_FUNCTION_LINES - 1), "function-length", 1),
    ("a long function with a multi-line signature is caught", "harness/f.c",
     fn("g", MAX_FUNCTION_LINES, "static int %s(int a,\n             int b)"), "function-length", 1),
    ("a long function is named past its attributes", "harness/f.c",
     fn("named", MAX_FUNCTION_LINES, "__attribute__((cold)) static int %s(void)"),
     "function-length", 1, "named: "),
    ("braces in comments, literals and macros do not count", "harness/f.c",
     "/* }\n{ */\nstatic const char *s = \"}\";\n#define OPEN {\n" + fn("h", 10).replace(
         "    x++;\n", "    x = '}'; /* { */ s = \"{\\\"\";\n", 1) + fn("i", MAX_FUNCTION_LINES - 2),
     "function-length", 0),
    ("an initializer on its own lines is not a function", "lib/core/t.c",
     "static const int t[] =\n{\n" + "    1,\n" * (MAX_FUNCTION_LINES + 5) + "};\n",
     "function-length", 0),
    ("functions inside extern \"C\" are counted", "lib/include/fattn/h.h",
     'extern "C" {\n' + fn("k", MAX_FUNCTION_LINES) + "}\n", "function-length", 1),
    ("a function with its brace on the signature line is caught", "lib/core/k.c",
     "int kr(void) {\n    return 0;\n}\n", "function-length", 1),
    ("a function on one line passes", "lib/core/k.c",
     "int one(void) { return 0; }\nint two(void) { return 1; }\n", "function-length", 0),
    ('strcmp with "cudnn" is caught', "lib/split/s.c",
     'int f(const char *n)\n{\n    return strcmp(n, "cudnn") == 0;\n}\n', "engine-name", 1),
    ('strncmp with "cpu" first and a nested call, over two lines, is caught', "harness/r.c",
     'int f(void)\n{\n    return !strncmp("cpu",\n                 name(g(1)), 3);\n}\n',
     "engine-name", 1),
    ("an engine name in a comment, an unrelated strcmp or a plain string passes",
     "lib/legacy/l.c",
     '/* strcmp(x, "cudnn") */\nconst char *e = "cudnn";\n'
     'int f(const char *n)\n{\n    return strcmp(n, "cudnnx") + strcmp(n, "gpu");\n}\n',
     "engine-name", 0),
    ("the registry may compare engine names", REGISTRY_FILE,
     'int f(const char *n)\n{\n    return strcmp(n, "cpu");\n}\n', "engine-name", 0),
    ("getenv in lib/legacy/ is caught", "lib/legacy/g.c",
     'int f(void)\n{\n    return getenv("X") != 0;\n}\n', "getenv", 1),
    ("secure_getenv in lib/split/ is caught", "lib/split/g.c",
     'int f(void)\n{\n    return secure_getenv("X") != 0;\n}\n', "getenv", 1),
    ("getenv anywhere in lib/ is caught", "lib/cudnn/g.c",
     'int f(void)\n{\n    return getenv("X") != 0;\n}\n', "getenv", 1),
    ("getenv in the harness passes", "harness/cli/cli.c",
     'int f(void)\n{\n    return getenv("X") != 0;\n}\n', "getenv", 0),
    ("getenv in the -Dtesting hook passes", "lib/core/testing.c",
     'int f(void)\n{\n    return getenv("X") != 0;\n}\n', "getenv", 0),
    ('an engine name as a string outside the registry is caught, twice', "harness/x.c",
     'const char *a = "cpu";\nint f(void)\n{\n    return g("cudnn");\n}\n',
     "engine-string", 2),
    ("an engine's own ops name it; the registry names all; comments and longer strings pass",
     "lib/cpu/engine.c",
     'const char *n = "cpu"; /* "cudnn" */\nconst char *m = "cudnn engine";\n',
     "engine-string", 0),
    ("an engine may not name another", "lib/cudnn/engine.c",
     'const char *n = "cudnn", *o = "cpu";\n', "engine-string", 1),
    ("the registry names every engine", REGISTRY_FILE,
     'const char *n[] = {"cpu", "cudnn"};\n', "engine-string", 0),
    ("getenv in a front end's comment or string passes", "lib/split/g.c",
     '/* getenv("X") */\nconst char *s = "getenv(";\n', "getenv", 0),
    ("lib/cudnn/ including lib/cpu/ headers is caught, three ways", "lib/cudnn/e.c",
     '#include "cpu/cpu.h"\n#include "../cpu/fmath.h"\n# include <cpu/x.h>\n',
     "cudnn-includes-cpu", 3),
    ("lib/cudnn/ including core, its own and public headers passes", "lib/cudnn/e.c",
     '#include "core/tensor.h"\n#include "graph.h"\n#include "fattn/cpu.h"\n'
     '/* #include "cpu/cpu.h" */\n', "cudnn-includes-cpu", 0),
    ("lib/cpu/ including its own headers passes", "lib/cpu/e.c",
     '#include "cpu/cpu.h"\n', "cudnn-includes-cpu", 0),
    ("printf, fprintf, vfprintf, puts, fputs and perror in a library are caught",
     "lib/core/p.c",
     'void f(void)\n{\n    printf("a");\n    fprintf(stderr, "b");\n    vfprintf(stderr, f, ap);\n'
     '    puts("c");\n    fputs("d", stderr);\n    perror("e");\n}\n', "print", 6),
    ("printing in harness/ outside cmd_*.c and fattn.c is caught", "harness/check/diff.c",
     'void f(void)\n{\n    fprintf(stderr, "x");\n}\n', "print", 1),
    ("harness/cli/cmd_*.c may print", "harness/cli/cmd_x.c",
     'void f(void)\n{\n    printf("x");\n}\n', "print", 0),
    ("fattn.c may print", "harness/cli/fattn.c", 'void f(void)\n{\n    puts("x");\n}\n',
     "print", 0),
    ("cmd_*.c outside cli/ may not print", "harness/check/cmd_x.c",
     'void f(void)\n{\n    printf("x");\n}\n', "print", 1),
    ("a status chain, a guarded condition and a guarded loop in lib/ are caught", "lib/core/e.c",
     "int f(void)\n{\n    int st = a();\n    if (st == FATTN_OK)\n        st = b();\n"
     "    if (st == FATTN_OK && c)\n        st = d();\n"
     "    for (int i = 0; i < 3 && st == FATTN_OK; i++)\n        st = e(i);\n    return st;\n}\n",
     "error-idiom", 3, "f: "),
    ("a call assigned and tested for success in one condition is caught", "lib/cpu/e.c",
     "int f(void)\n{\n    if ((st = a(1)) == FATTN_OK)\n        b();\n"
     "    if ((st = a(2)) != FATTN_OK)\n        return st;\n    return st;\n}\n",
     "error-idiom", 1),
    ("early returns, goto out, a builder's sticky status and comments pass", "lib/cudnn/e.c",
     "int f(struct b *bd)\n{\n    int st = a(); /* if (st == FATTN_OK) */\n"
     "    if (st != FATTN_OK)\n        return st;\n    if (bd->st == FATTN_OK)\n        g();\n"
     "    st = h();\n    if (st != FATTN_OK)\n        goto out;\n    x = c ? 1\n      : 2;\n"
     "    switch (x) {\n    case 1:\n        break;\n    default:\n        break;\n    }\n"
     "out:\n    free(p);\n    return st;\n}\n", "error-idiom", 0),
    ("a status tested for truth, bare or assigned, is caught", "lib/core/t.c",
     "int f(void)\n{\n    if (st)\n        return st;\n    if (!st)\n        g();\n"
     "    if ((st = a(1)) || (st = a(2)) != FATTN_OK)\n        return st;\n"
     "    if (x && (st = b(c(1), 2)))\n        return st;\n    return st;\n}\n",
     "error-idiom", 4, "f: the status tested for truth"),
    ("a goto fail and its label in lib/ are caught", "lib/split/e.c",
     "int f(void)\n{\n    int st = a();\n    if (st != FATTN_OK)\n        goto fail;\n"
     "    return 0;\nfail:\n    return st;\n}\n", "error-idiom", 2),
    ("the allowed function may guard a step", "lib/cudnn/plan_store.c",
     "int fattn__ps_write_atomic(void)\n{\n    if (close(fd) != 0 && st == FATTN_OK)\n"
     "        st = e();\n    return st;\n}\n", "error-idiom", 0),
    ("the harness is held to the idiom too", "harness/run/e.c",
     "int f(void)\n{\n    if (st == FATTN_OK)\n        goto done;\n    if (!st)\n        x();\n"
     "done:\n    return st;\n}\n",
     "error-idiom", 4),
    ("the harness's out label, and a step after a failure that keeps it, pass",
     "harness/files/e.c",
     "int f(void)\n{\n    fattn_status st = a();\n    if (st != FATTN_OK)\n        goto out;\n"
     "    st = b();\nout:\n    return end_it(st);\n}\n",
     "error-idiom", 0),
    ("formatting into a buffer is not printing", "lib/core/s.c",
     'void f(char *b)\n{\n    snprintf(b, 4, "x"); /* printf("x") */\n    vsnprintf(b, 4, "%s", ap);\n'
     '    const char *s = "puts(";\n}\n', "print", 0),
]


def self_test(name, rel, content, rule, want, detail=None):
    """rel and content: one file; or rel a dict of path -> content (a tree)
    and content None."""
    tree = rel if isinstance(rel, dict) else {rel: content}

    def run():
        with tempfile.TemporaryDirectory(prefix="fattn-structure-") as root:
            for path, text in tree.items():
                path = os.path.join(root, path)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            got = [v for v in check_tree(root) if v.rule == rule]
        if len(got) != want or (detail and not all(v.detail.startswith(detail) for v in got)):
            raise AssertionError("%s: expected %d %s violation(s)%s, got %d:\n%s" % (
                rel, want, rule, " starting '%s'" % detail if detail else "", len(got),
                "\n".join(map(str, got)) or "(none)"))
    return ("self-test %s: %s" % (rule, name), run)


# Trees for the harness folder rules: a header per folder, each declaring
# one function.
H_TREE = {"harness/%s/%s.h" % (d, d): "int %s_fn(int a);\n" % d for d in HARNESS_FLOORS}
HARNESS_SELF_TESTS = [
    ("a harness C file outside the folders is caught", dict(H_TREE, **{"harness/x.c": "int x;\n"}),
     None, "harness-folder", 1),
    ("every file in a folder passes", H_TREE, None, "harness-folder", 0),
    ("run/ including model/ and files/ and its own passes",
     dict(H_TREE, **{"harness/run/r.c": '#include "model.h"\n#include "files.h"\n'
                                          '#include "run.h"\n#include "fattn/engine.h"\n'}),
     None, "harness-layers", 0),
    ("model/ including run/, and files/ including model/ (one floor), are caught",
     dict(H_TREE, **{"harness/model/m.c": '#include "run.h"\n',
                     "harness/files/f.c": '#include "model/model.h"\n'}),
     None, "harness-layers", 2),
    ("check/ including cli/ is caught, an include in a comment is not",
     dict(H_TREE, **{"harness/check/c.c": '#include "cli.h"\n/* #include "cli.h" */\n'}),
     None, "harness-layers", 1, "check/ includes cli.h"),
    ("a function defined in the folder of its header passes",
     dict(H_TREE, **{"harness/run/r.c": "int run_fn(int a)\n{\n    return a;\n}\n"}),
     None, "harness-defined", 0),
    ("a function declared in files/ and defined in run/ is caught",
     dict(H_TREE, **{"harness/run/r.c": "int files_fn(int a)\n{\n    return a;\n}\n"}),
     None, "harness-defined", 1, "files_fn is declared in files/"),
    ("a harness header declaring a fattn_ function is caught",
     dict(H_TREE, **{"harness/run/r.h": "#include \"run.h\"\nfattn_status fattn_run_x(int a);\n"}),
     None, "harness-prefix", 1, "fattn_run_x: "),
    ("a fattn_ macro, tag, typedef, pointer type, enum constant, pasted family, global "
     "and definition in harness/ are caught",
     dict(H_TREE, **{"harness/check/c.h": "#define FATTN_N 3\n"
                     "typedef struct fattn_s {\n    int a;\n} fattn_t;\n"
                     "typedef int (*fattn_fn)(int);\n"
                     "typedef int fattn_pair[2];\n"
                     "enum { FATTN_A = 1, FATTN_B };\n"
                     "#define FH_ROW(x) FATTN_ROW_##x\n"
                     "extern const int fattn_table[4];\n",
                     "harness/check/c.c": "static int fattn__helper(void)\n{\n    return 0;\n}\n"
                     "int FATTN_counter = 0;\n"}),
     None, "harness-prefix", 11),
    ("fh_ names, uses of the public API and fattn_ in comments and strings pass",
     dict(H_TREE, **{"harness/model/m.h": "#define FH_N FATTN_E_OOM\n"
                     "typedef struct fh_s {\n    fattn_dtype d;\n} fh_s;\n"
                     "fattn_status fh_model_x(fattn_tensor *t, int n);\n"
                     "enum { FH_A = FATTN_OK, FH_B };\n"
                     "#define FH_NAME(c) fattn_##c##_name\n"
                     "/* fattn_old(void); */\n",
                     "harness/model/m.c": "static const char *s = \"fattn_x;\";\n"
                     "fattn_status fh_model_x(fattn_tensor *t, int n)\n{\n"
                     "    fattn_status st = fattn_tensor_alloc(t, n);\n    return st;\n}\n"}),
     None, "harness-prefix", 0),
    ("a header template meson configures is held to the prefix, outside the folders too",
     dict(H_TREE, **{"harness/rev.h.in": "#define FATTN_REV \"@V@\"\n#define FH_OK 1\n"}),
     None, "harness-prefix", 1, "FATTN_REV: "),
    ("a public name the harness repeats passes",
     dict(H_TREE, **{"lib/include/fattn/p.h": "int fattn_public(void);\n",
                     "harness/cli/c.h": "int fattn_public(void);\n"}),
     None, "harness-prefix", 0),
]


def classify_self_test():
    """The allowlist: known violations are TODO, unknown ones fail, entries
    that match nothing are stale."""
    vs = [Violation("print", "lib/a.c", 3, "x"), Violation("print", "lib/b.c", 4, "y"),
          Violation("function-length", "lib/a.c", 9, "f: 200 lines", "f")]
    res = classify(vs, [("print", "lib/a.c"), ("function-length", "lib/a.c", "g"),
                        ("getenv", "lib/split/s.c")])
    unknown, known, stale = res["print"]
    assert [str(v) for v in unknown] == ["lib/b.c:4: print: y"], unknown
    assert [str(v) for v in known] == ["lib/a.c:3: print: x"], known
    assert [v.path for v in res["function-length"][0]] == ["lib/a.c"], \
        "a new long function in a known file must fail"
    assert res["function-length"][2] == [("function-length", "lib/a.c", "g")]
    assert res["getenv"] == ([], [], [("getenv", "lib/split/s.c")])


# ---- TAP ---------------------------------------------------------------------

def tree_tests(root):
    res = classify(check_tree(root), KNOWN_VIOLATIONS)
    tests, todo = tap.Tests(), {}
    for rule in RULES:
        unknown, known, stale = res[rule]
        name = "tree %s" % rule
        if known and not unknown:
            todo[name] = "%d known violation(s), KNOWN_VIOLATIONS in tests/check_structure.py" % \
                len(known)

        def run(unknown=unknown, known=known, stale=stale):
            for k in stale:
                print("# no longer found, delete from KNOWN_VIOLATIONS: %r" % (k,))
            if unknown or known:
                raise AssertionError("\n".join(
                    [str(v) for v in unknown] + ["%s (known)" % v for v in known]))
        tests.case(name)(run)
    return tests, todo


def main(argv):
    args = argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    mode = args.pop(0) if args and args[0] in ("--list", "--self-test-only") else None
    if len(args) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = args[0]
    if mode == "--list":
        res = classify(check_tree(root), KNOWN_VIOLATIONS)
        for rule in RULES:
            for v in res[rule][0]:
                print(v)
            for v in res[rule][1]:
                print("%s (known)" % v)
        return 1 if any(res[r][0] for r in RULES) else 0
    tests = tap.Tests()
    for row in SELF_TESTS + HARNESS_SELF_TESTS:
        tests.append(self_test(*row))
    tests.case("self-test allowlist: known violations are TODO, new ones fail")(classify_self_test)
    todo = {}
    if mode != "--self-test-only":
        more, todo = tree_tests(root)
        tests += more
    return 1 if tap.run(tests, todo=todo.get) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
