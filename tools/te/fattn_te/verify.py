"""fattn-te verify --te A --te B: TE A vs TE B, and each against fattn's C
front end of its shape (legacy for a monolith, split for the refactor), one
verdict line per pair (docs/te.md). Exit 0 when every pair is neutral but
for the deviations in DEVIATIONS, 1 on any other difference (an errored
case included), 2 on an error of the tool or bad input."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from . import cli

HERE = os.path.dirname(os.path.abspath(__file__))


_RUN_LINE = re.compile(r"\((?:(\d+) through FusedAttention, )?(\d+) through "
                       r"FusedAttnFunc\.apply; (\d+) errored\)")


def _te_run(root, args, out):
    """fattn-te run on one TE (a root te_root checked); exit 1 (cases that
    errored, recorded in the file) is a result. Returns (through the module,
    through FusedAttnFunc.apply, why those took it)."""
    argv = [os.path.join(os.path.dirname(HERE), "fattn-te"), "run", "--te", root,
            "--backend", args.backend, "--call", args.call, "-o", out] + cli.fattn_args(args)
    p = subprocess.run(argv, capture_output=True, text=True)
    m = _RUN_LINE.search(p.stdout)
    if p.returncode not in (0, 1) or not m:
        sys.stderr.write(p.stdout + p.stderr)
        raise RuntimeError(f"fattn-te run --te {root}: exit {p.returncode}")
    why = re.search(r"^  through FusedAttnFunc\.apply: (.*)$", p.stdout, re.M)
    return int(m.group(1) or 0), int(m.group(2)), why.group(1) if why else ""


def _errored(path):
    """case id -> reason of the cases fattn-te recorded as errored."""
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        for cid, g in f["cases"].items():
            r = g.attrs.get("skipped")
            r = r.decode() if isinstance(r, bytes) else r
            if r and r.startswith(cli.ERROR_PREFIX):
                out[cid] = r[len(cli.ERROR_PREFIX):]
    return out


# The one table of documented deviations (docs/te.md, "Findings"): a
# difference that matches an entry is listed under its verdict, not
# counted. An entry: where it may appear (pairs of a fattn front end and a
# TE), the path, which cases (on their resolved model) and which kind of
# difference, the reason and TE's lines.
_CASE_PATH = re.compile(r"^/cases/([^/]+)/forward/max_logit$")
DEVIATIONS = [{
    "name": "max_logit with a padding mask in bshd/sbhd",
    "fattn_pairs_only": True,
    "path": _CASE_PATH,
    "case": lambda r: bool(r.get("padding")) and not r.get("thd")
    and bool(r["spec"].get("return_max_logit")),
    # TE's amax is NaN (the poisoned rows past the lengths), fattn's finite
    "entry": lambda e: e["status"] == "different" and e.get("count") is not None
    and (e.get("ulp_histogram") or {}).get("class_changes", 0) == e["count"],
    "reason": "TE's torch.amax reads Max rows past each sequence's length (undefined "
              "memory); fattn counts the defined rows",
    "te_lines": "cpp_extensions/fused_attn.py:412,441 (2.19.0, 2.20.2)",
}]


def _documented(path, e, resolved, fattn_pair):
    for d in DEVIATIONS:
        if d["fattn_pairs_only"] and not fattn_pair:
            continue
        m = d["path"].match(path)
        if m and m.group(1) in resolved and d["case"](resolved[m.group(1)]) and d["entry"](e):
            return d
    return None


def _is_refactored(root):
    path = os.path.join(root, "transformer_engine", "pytorch", "attention",
                        "dot_product_attention", "backends.py")
    with open(path, encoding="utf-8") as f:
        return "class FusedAttnFwdArgs" in f.read()


def _cases(path):
    import h5py
    with h5py.File(path, "r") as f:
        return len(f["cases"])


# On cuDNN 9.19 the gradient of the sink (softmax offset) is summed in an
# order that changes run to run even with the deterministic backward
# (docs/determinism.md); `fattn verify` compares it within the io dtype's
# tolerance there (harness/verify.c cudnn_noisy), and so does this.
_NOISY = re.compile(r"^/cases/([^/]+)/backward/d_softmax_offset$")
_TOL = os.path.join(cli.SRC, "tolerances", "fattn-tol-1.json")
_SHOWN = 12


def _diff_json(fattn, a, b, extra=()):
    p = subprocess.run([fattn, "diff", a, b, "--json", "-"] + list(extra),
                       capture_output=True, text=True)
    if p.returncode not in (0, 1):
        sys.stderr.write(p.stdout + p.stderr)
        raise RuntimeError(f"fattn diff {a} {b}: exit {p.returncode}")
    return json.loads(p.stdout)


def _within_tolerance(fattn, a, b, path, io_dtype):
    with open(_TOL, encoding="utf-8") as f:
        t = json.load(f)["dtypes"][io_dtype]
    r = _diff_json(fattn, a, b, ["--mode", "tol", "--only", path,
                                 "--tol", f"{path}={t['rtol']},{t['atol']}"])
    return r["exit"] == 0


def _n(k, word):
    return f"{k} {word}{'' if k == 1 else 's'}"


def _what(e):
    what = e["status"].replace("_", " ")
    if e["status"] == "different" and e.get("count") is not None:
        what += f": {e['count']} of {e.get('numel')} elements"
        cls = (e.get("ulp_histogram") or {}).get("class_changes", 0)
        if cls:  # max abs is over the finite pairs only
            what += f", {cls} NaN/Inf vs finite"
        if cls != e["count"]:
            what += f", max abs {e.get('max_abs')}"
    return what


def _verdict(fattn, a_name, a, b_name, b, io_dtypes, resolved=None, fattn_pair=False,
             kept=True, left_out=""):
    """One verdict line for A vs B, then each documented deviation and each
    counted difference. io_dtypes: case id -> io dtype where the backend's
    d_softmax_offset is compared within tolerance (cuDNN), else None.
    resolved: case id -> resolved case, for DEVIATIONS; fattn_pair: A is a
    fattn front end's run. Returns 0 (neutral, deviations aside) or 1."""
    r = _diff_json(fattn, a, b)
    n = sum(1 for e in r["paths"].values() if e["kind"] in ("dataset", "digest"))
    counted, noisy, documented = [], [], []
    for path, e in sorted(r["paths"].items()):
        if e["status"] in ("equal", "private"):
            continue
        m = _NOISY.match(path)
        if (io_dtypes and m and e["status"] == "different" and m.group(1) in io_dtypes
                and _within_tolerance(fattn, a, b, path, io_dtypes[m.group(1)])):
            noisy.append(path)
            continue
        d = _documented(path, e, resolved or {}, fattn_pair)
        if d:
            documented.append((path, e, d))
            continue
        counted.append((path, e))
    ncases = _cases(a)
    note = (f"; {len(noisy)} d_softmax_offset within tolerance (non-deterministic on "
            f"this engine)") if noisy else ""
    note += left_out
    dev = f"{len(documented)} documented deviation{'' if len(documented) == 1 else 's'}"
    if not counted:
        word = f"neutral ({dev})" if documented else "yes"
        print(f"{a_name} -> {b_name}: behavior-neutral: {word} ({_n(ncases, 'case')}, "
              f"{_n(n, 'tensor')}{note})")
    else:
        extra = f"; {dev}" if documented else ""
        print(f"{a_name} -> {b_name}: behavior-neutral: no ({len(counted)} of {_n(n, 'tensor')} "
              f"differ in {_n(ncases, 'case')}{extra}{note})")
    for path, e, d in documented:
        print(f"  documented: {path}  {_what(e)}: {d['name']} (TE {d['te_lines']}; docs/te.md, "
              f"Findings)")
    # an errored case's paths as one line, naming the run it errored in
    errs = {"A": _errored(a), "B": _errored(b)}
    shown, cases_shown = [], set()
    for path, e in counted:
        m = re.match(r"^/cases/([^/@]+)", path)
        cid = m.group(1) if m else None
        where = [k for k in ("A", "B") if cid in errs[k]]
        if not where:
            shown.append(f"  {path}  {_what(e)}")
        elif cid not in cases_shown:
            cases_shown.add(cid)
            name = {"A": a_name, "B": b_name}
            shown.append(f"  /cases/{cid}  errored in {' and '.join(name[k] for k in where)}: "
                         f"{errs[where[-1]][cid]}")
    for line in shown[:_SHOWN]:
        print(line)
    if len(shown) > _SHOWN:
        more = (f"fattn diff {a} {b}" if kept else
                "run again with --keep DIR, then fattn diff on the two files it names")
        print(f"  ... and {len(shown) - _SHOWN} more ({more})")
    return 1 if counted else 0


def _io_dtypes(args, fattn):
    if args.backend != "cudnn":
        return None
    return {c["id"]: c["spec"]["dtype"] for c in cli.rf.resolved_cases(args.cases, fattn=fattn)
            if "spec" in c}


def _left_out(args, fattn):
    """The default-matrix cases fattn-te leaves out, and why (the FP8 cases:
    no FP8 path in the shim), as one clause of the verdict lines."""
    if args.cases:
        return "", ""
    fp8 = [r["id"] for r in cli.rf.resolved_cases(None, fattn=fattn)
           if r.get("spec", {}).get("fp8")]
    if args.filter:
        import fnmatch
        fp8 = [c for c in fp8 if fnmatch.fnmatchcase(c, args.filter)]
    if not fp8:
        return "", ""
    return (f"; {len(fp8)} FP8 cases left out: no FP8 path in the shim",
            f"left out (no FP8 path in fattn-te's shim): {' '.join(fp8)}")


def main(args):
    if len(args.te) != 2:
        raise cli.rf.InputError("verify takes --te twice (A and B)")
    fattn = cli.rf.find_fattn()
    tmp = tempfile.mkdtemp(prefix="fattn-te-verify-")
    work = args.keep or tmp
    try:
        os.makedirs(work, exist_ok=True)
        # every --te is checked (and a wheel unpacked) before any TE runs
        roots = [cli.te_root(t, tmp) for t in args.te]
        names = [cli.te_impl(r) for r in roots]
        if names[0] == names[1]:
            names = [f"{n} ({t})" for n, t in zip(names, args.te)]
        left_clause, left_line = _left_out(args, fattn)
        # TE's runs and fattn's front-end runs over the same cases.
        args.cases = cli.expressible_cases(args.cases, fattn, tmp)
        files, through = [], []
        for i, root in enumerate(roots):
            out = os.path.join(work, f"te{i + 1}.h5")
            through.append(_te_run(root, args, out))
            files.append(out)
        fe_files = {}
        for r in roots:
            impl = "split" if _is_refactored(r) else "legacy"
            if impl not in fe_files:
                out = os.path.join(work, f"fattn-{impl}.h5")
                argv = [fattn, "run", "--impl", impl, "--backend", args.backend, "-o",
                        out] + cli.fattn_args(args)
                p = subprocess.run(argv, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.stderr.write(p.stderr)
                    raise RuntimeError(f"fattn run --impl {impl}: exit {p.returncode}")
                fe_files[impl] = out
        io = _io_dtypes(args, fattn)
        resolved = {c["id"]: c for c in cli.rf.resolved_cases(args.cases, fattn=fattn)
                    if "spec" in c}
        kept = bool(args.keep)
        rc = _verdict(fattn, names[0], files[0], names[1], files[1], io, resolved, False, kept,
                      left_clause)
        for name, f, r in zip(names, files, roots):
            impl = "split" if _is_refactored(r) else "legacy"
            rc = max(rc, _verdict(fattn, f"fattn-{impl}", fe_files[impl], name, f, io,
                                  resolved, True, kept, left_clause))
        errs = [_errored(f) for f in files]
        for name, (mod, func, why), err in zip(names, through, errs):
            print(f"{name}: {_n(mod, 'case')} through FusedAttention, {func} through "
                  f"FusedAttnFunc.apply{f' ({why})' if why else ''}, {len(err)} errored")
            for cid, reason in sorted(err.items()):
                only = "" if all(cid in e for e in errs) else " (errored in this TE only)"
                print(f"  errored: {cid}{only}: {reason}")
        if left_line:
            print(left_line)
        if any(errs):
            rc = max(rc, 1)
        return rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
