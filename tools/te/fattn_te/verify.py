"""fattn-te verify --te A --te B: TE A vs TE B, and each against fattn's C
front end of its shape (legacy for a monolith, split for the refactor), one
verdict line per pair; exit codes as `fattn verify` (0 every pair neutral,
1 a difference, 2 an error)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from . import cli

HERE = os.path.dirname(os.path.abspath(__file__))


def _te_run(te, args, out):
    argv = [os.path.join(os.path.dirname(HERE), "fattn-te"), "run", "--te", te,
            "--backend", args.backend, "-o", out] + cli.fattn_args(args)
    env = dict(os.environ, FATTN_TE_REFUSALS=out[:-len(".h5")] + "-refusals.json")
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise RuntimeError(f"fattn-te run --te {te}: exit {p.returncode}")


def _is_refactored(root):
    path = os.path.join(root, "transformer_engine", "pytorch", "attention",
                        "dot_product_attention", "backends.py")
    with open(path, encoding="utf-8") as f:
        return "class FusedAttnFwdArgs" in f.read()


def _cases(path):
    import h5py
    with h5py.File(path, "r") as f:
        return len(f["cases"])


def _fp8_counts(path):
    """(FP8 cases TE ran, FP8 cases refused) in a TE run file."""
    import h5py
    ran = refused = 0
    with h5py.File(path, "r") as f:
        for case in f["cases"].values():
            spec = json.loads(case.attrs["spec"])
            if not spec.get("fp8"):
                continue
            if "refused_rule" in case.attrs or "skipped" in case.attrs:
                refused += 1
            else:
                ran += 1
    return ran, refused


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


def _verdict(fattn, a_name, a, b_name, b, io_dtypes):
    """One verdict line for A vs B, then each counted difference. io_dtypes:
    case id -> io dtype where the backend's d_softmax_offset is compared
    within tolerance (cuDNN), else None."""
    r = _diff_json(fattn, a, b)
    n = sum(1 for e in r["paths"].values() if e["kind"] in ("dataset", "digest"))
    counted, noisy = [], []
    for path, e in sorted(r["paths"].items()):
        if e["status"] in ("equal", "private"):
            continue
        m = _NOISY.match(path)
        if (io_dtypes and m and e["status"] == "different" and m.group(1) in io_dtypes
                and _within_tolerance(fattn, a, b, path, io_dtypes[m.group(1)])):
            noisy.append(path)
            continue
        counted.append((path, e))
    ncases = _cases(a)
    note = (f"; {len(noisy)} d_softmax_offset within tolerance (non-deterministic on "
            f"this engine)") if noisy else ""
    if not counted:
        print(f"{a_name} -> {b_name}: behavior-neutral: yes ({_n(ncases, 'case')}, "
              f"{_n(n, 'tensor')}{note})")
        return 0
    print(f"{a_name} -> {b_name}: behavior-neutral: no ({len(counted)} of {_n(n, 'tensor')} "
          f"differ in {_n(ncases, 'case')}{note})")
    for path, e in counted[:_SHOWN]:
        what = e["status"].replace("_", " ")
        if e["status"] == "different" and e.get("count") is not None:
            what += f": {e['count']} of {e.get('numel')} elements"
            cls = (e.get("ulp_histogram") or {}).get("class_changes", 0)
            if cls:  # max abs is over the finite pairs only
                what += f", {cls} NaN/Inf vs finite"
            if cls != e["count"]:
                what += f", max abs {e.get('max_abs')}"
        print(f"  {path}  {what}")
    if len(counted) > _SHOWN:
        print(f"  ... and {len(counted) - _SHOWN} more (fattn diff {a} {b})")
    return 1


def _io_dtypes(args, fattn):
    if args.backend != "cudnn":
        return None
    return {c["id"]: c["spec"]["dtype"] for c in cli.rf.resolved_cases(args.cases, fattn=fattn)
            if "spec" in c}


def main(args):
    if len(args.te) != 2:
        raise cli.rf.InputError("verify takes --te twice (A and B)")
    fattn = cli.rf.find_fattn()
    work = args.keep or tempfile.mkdtemp(prefix="fattn-te-verify-")
    os.makedirs(work, exist_ok=True)
    try:
        # TE's runs and fattn's front-end runs over the same cases.
        roots = [cli.te_root(t) for t in args.te]
        names = [cli.te_impl(r) for r in roots]
        if names[0] == names[1]:
            names = [f"{n} ({t})" for n, t in zip(names, args.te)]
        files = []
        for i, te in enumerate(args.te):
            out = os.path.join(work, f"te{i + 1}.h5")
            _te_run(te, args, out)
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
        rc = _verdict(fattn, names[0], files[0], names[1], files[1], io)
        for name, f, r in zip(names, files, roots):
            impl = "split" if _is_refactored(r) else "legacy"
            rc = max(rc, _verdict(fattn, f"fattn-{impl}", fe_files[impl], name, f, io))
        from . import refusal
        for name, f in zip(names, files):
            with open(f[:-len(".h5")] + "-refusals.json", encoding="utf-8") as fh:
                print(f"{name}: refusals: {refusal.summary(json.load(fh))}")
        ran, refused = _fp8_counts(files[0])
        print(f"FP8: exercised ({_n(ran, 'case')} through TE's FP8 path; "
              f"{refused} refused)" if ran else f"FP8: not exercised ({refused} refused)")
        return rc
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
