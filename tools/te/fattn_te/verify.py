"""fattn-te verify --te A --te B: TE A vs TE B, and each against fattn's C
front end of its shape (legacy for a monolith, split for the refactor), one
verdict line per pair; exit codes as `fattn verify` (0 every pair neutral,
1 a difference, 2 an error)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from . import cli

HERE = os.path.dirname(os.path.abspath(__file__))
_SUMMARY = re.compile(r"summary: (\d+) datasets compared, (\d+) counted differences")


def _te_run(te, args, out):
    argv = [os.path.join(os.path.dirname(HERE), "fattn-te"), "run", "--te", te,
            "--backend", args.backend, "-o", out] + cli.fattn_args(args)
    p = subprocess.run(argv, capture_output=True, text=True)
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


def _verdict(fattn, a_name, a, b_name, b):
    p = subprocess.run([fattn, "diff", a, b], capture_output=True, text=True)
    m = _SUMMARY.search(p.stdout)
    if p.returncode not in (0, 1) or not m:
        sys.stderr.write(p.stdout + p.stderr)
        raise RuntimeError(f"fattn diff {a_name} {b_name}: exit {p.returncode}")
    n, d = int(m.group(1)), int(m.group(2))
    ncases = _cases(a)
    if p.returncode == 0:
        print(f"{a_name} -> {b_name}: behavior-neutral: yes ({ncases} cases, {n} tensors)")
        return 0
    first = next((ln for ln in p.stdout.splitlines() if ln.startswith("different:")
                  or ln.startswith("missing") or ln.startswith("structure")), "")
    print(f"{a_name} -> {b_name}: behavior-neutral: no ({d} of {n} tensors differ in "
          f"{ncases} cases; first: {first.split('  ')[0].split(': ', 1)[-1]})")
    return 1


def main(args):
    if len(args.te) != 2:
        raise cli.rf.InputError("verify takes --te twice (A and B)")
    fattn = cli.rf.find_fattn()
    work = args.keep or tempfile.mkdtemp(prefix="fattn-te-verify-")
    os.makedirs(work, exist_ok=True)
    try:
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
        rc = _verdict(fattn, names[0], files[0], names[1], files[1])
        for name, f, r in zip(names, files, roots):
            impl = "split" if _is_refactored(r) else "legacy"
            rc = max(rc, _verdict(fattn, f"fattn-{impl}", fe_files[impl], name, f))
        return rc
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
