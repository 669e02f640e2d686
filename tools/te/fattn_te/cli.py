"""fattn-te: TE's own FusedAttnFunc through fattn's harness (docs/te.md)."""
import argparse
import faulthandler
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(SRC, "tools", "python"))
import fattn_runfile as rf  # noqa: E402

_T0 = time.monotonic()


def env_dir():
    return os.environ.get("FATTN_TE_ENV", os.path.join(os.path.expanduser("~"), ".cache",
                                                       "fattn-te"))


def te_root(arg):
    """--te VERSION (a release setup.sh unpacked) or PATH (a wheel or source tree)."""
    if os.path.isdir(arg):
        return os.path.abspath(arg)
    root = os.path.join(env_dir(), "te", arg)
    if not os.path.isdir(root):
        raise rf.InputError(f"--te {arg}: not a directory and not a release in {env_dir()}/te "
                            f"(run tools/te/setup.sh {arg})")
    return root


def te_impl(root):
    """te-<version> of a wheel (its dist-info), te-<git describe> of a source tree."""
    for name in sorted(os.listdir(root)):
        if name.startswith("transformer_engine-") and name.endswith(".dist-info"):
            return "te-" + name[len("transformer_engine-"):-len(".dist-info")]
    try:
        d = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty", "--tags"],
                           capture_output=True, text=True, check=True).stdout.strip()
        if d:
            return "te-" + d
    except (OSError, subprocess.CalledProcessError):
        pass
    vf = os.path.join(root, "build_tools", "VERSION.txt")
    if os.path.isfile(vf):
        return "te-" + open(vf).read().strip()
    return "te-unknown"


def fattn_args(args):
    out = []
    if args.cases:
        out += ["--cases", args.cases]
    if args.filter:
        out += ["--filter", args.filter]
    return out


def run_fattn(fattn, argv):
    p = subprocess.run([fattn] + argv, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def _count_datasets(node):
    if "children" not in node:
        return 1
    return sum(_count_datasets(c) for c in node["children"].values())


def _progress(msg):
    """One line per stage on stderr when FATTN_TE_PROGRESS is set: a run
    that is stopped from outside then says how far it got."""
    if os.environ.get("FATTN_TE_PROGRESS"):
        sys.stderr.write(f"fattn-te: {time.monotonic() - _T0:8.1f} s  {msg}\n")
        sys.stderr.flush()


def _trace_stalls():
    """FATTN_TE_STALL_S=N: every N seconds, every thread's Python stack goes
    to stderr, so a stall (a hung driver call, a lock) shows where it sits."""
    n = os.environ.get("FATTN_TE_STALL_S")
    if n:
        faulthandler.dump_traceback_later(float(n), repeat=True, file=sys.stderr)


def cmd_run_one(te, backend, cases, filt, out, fattn):
    """One TE run in this process; returns (cases, tensors)."""
    _trace_stalls()
    work = tempfile.mkdtemp(prefix="fattn-te-")
    root = te_root(te)
    _progress(f"importing TE from {root}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fattn_te import loader, bridge, record
        backends = loader.import_backends(root)
    # Bitwise checks need a backward that repeats bitwise: on cuDNN the
    # deterministic algorithm is forced, as `fattn verify` forces it.
    forced = backend == "cudnn"
    bridge.set_engine(bridge.Engine(backend, deterministic_bwd=forced))
    if backend == "cpu":
        from fattn_te import patches
        patches.apply_cpu()
    _progress(f"TE imported; {backend} engine open")
    ref = os.path.join(work, "ref.h5")
    argv = ["run", "--impl", "split" if record.is_refactored(backends) else "legacy",
            "--backend", backend, "-o", ref]
    if cases:
        argv += ["--cases", cases]
    if filt:
        argv += ["--filter", filt]
    _progress("fattn run (inputs and refusals) started")
    rc, so, se = run_fattn(fattn, argv)
    if rc != 0:
        sys.stderr.write(se)
        raise rf.InputError(f"fattn {' '.join(argv)}: exit {rc}")
    _progress("fattn run done")
    tree = rf.load_tree(ref)
    resolved = {r["id"]: r for r in rf.resolved_cases(cases, fattn=fattn)}
    root_attrs = [a for a in tree["attrs"]
                  if a[0] not in ("impl", "git_rev", "forced_deterministic_bwd")]
    root_attrs.append(("forced_deterministic_bwd", np.uint8(forced), np.dtype("uint8")))
    root_attrs.append(("impl", te_impl(root), None))
    root_attrs.append(("git_rev", rf.attr_value(tree, "git_rev"), None))
    out_cases = {}
    ntensors = 0
    for cid, case in tree["children"]["cases"]["children"].items():
        attrs = [a for a in case["attrs"] if a[0] != "attrs_digest"]
        if any(a[0] in ("skipped", "refused_rule") for a in attrs):
            # fattn refused it: asked of TE where TE refuses it (refusal.py);
            # recorded as fattn refused it unless TE runs it.
            from fattn_te import refusal
            _progress(f"case {cid} (refused by fattn)")
            children = refusal.run(backends, cid, resolved[cid], attrs)
            if children is None:
                out_cases[cid] = {"attrs": attrs, "children": {}}
                continue
            attrs = [a for a in attrs if not a[0].startswith("refused_")]
            out_cases[cid] = {"attrs": attrs, "children": children}
            ntensors += _count_datasets({"children": children})
            continue
        _progress(f"case {cid}")
        try:
            children = record.run_case(backends, resolved[cid], case)
        except Exception as e:  # TE's own refusals are data; anything else is an error
            raise RuntimeError(f"case {cid}: TE raised {type(e).__name__}: {e}") from e
        out_cases[cid] = {"attrs": attrs, "children": children}
        ntensors += _count_datasets({"children": children})
    from fattn_te import refusal
    refusal.write_log()
    new = {"attrs": sorted(root_attrs, key=lambda a: a[0]),
           "children": {"cases": {"attrs": [], "children": out_cases}}}
    _progress(f"writing {out}")
    rf.write_tree(out, new, fattn=fattn)
    return len(out_cases), ntensors


def check_output(path):
    """-o is checked before any work (as fattn's commands do): its directory
    must exist and the target must be absent or a regular file."""
    d = rf.target_dir(path)
    if not os.path.isdir(d):
        raise rf.InputError(f"{path}: directory {d} does not exist")


def cmd_run(args):
    check_output(args.o)
    fattn = rf.find_fattn()
    n, m = cmd_run_one(args.te, args.backend, args.cases, args.filter, args.o, fattn)
    print(f"fattn-te run: wrote {n} case{'' if n == 1 else 's'} ({m} tensor{'' if m == 1 else 's'}) "
          f"of {te_impl(te_root(args.te))} "
          f"to {args.o}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fattn-te")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run TE's FusedAttnFunc on every case, write a run file")
    r.add_argument("--te", required=True, help="a TE release (setup.sh) or a directory")
    r.add_argument("--backend", default="cpu", choices=["cpu", "cudnn"])
    r.add_argument("--cases")
    r.add_argument("--filter")
    r.add_argument("-o", required=True)
    v = sub.add_parser("verify", help="TE A vs TE B, and each against fattn's front end")
    v.add_argument("--te", action="append", required=True)
    v.add_argument("--backend", default="cpu", choices=["cpu", "cudnn"])
    v.add_argument("--cases")
    v.add_argument("--filter")
    v.add_argument("--keep", help="keep the run files in this directory")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            return cmd_run(args)
        from fattn_te import verify
        return verify.main(args)
    except rf.InputError as e:
        print(f"fattn-te: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"fattn-te: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
