"""fattn-te: TE's own FusedAttnFunc through fattn's harness (docs/te.md)."""
import argparse
import faulthandler
import os
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np

# where.py: the names cli has always offered, used here and by its callers
from .where import (ERROR_PREFIX, HERE, ROUTED_PREFIX, SRC, _count_datasets,  # noqa: F401
                    check_output, env_dir, fattn_args, progress_line, progress_wanted, rf,
                    run_fattn, te_impl, te_root, use_library_of)

_T0 = time.monotonic()


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


def describe_error(e):
    """A case's error as its recorded reason, saying who raised it
    (blame.py): TE, with the TE line it came from, or TE's hand-off;
    fattn-te's own errors are not recorded (blame.ToolError)."""
    from fattn_te import blame
    return ERROR_PREFIX + blame.classify(e)[1]


def cmd_run_one(root, backend, cases, filt, out, fattn, call="module", work=None,
                progress=False):
    """One TE run in this process; returns (cases, tensors, errored, paths):
    errored a list of (case id, reason); paths counts the cases by path, and
    under "why" those through FusedAttnFunc.apply by reason."""
    _trace_stalls()
    use_library_of(fattn)
    if call == "dpa":
        from fattn_te import dpa
        if not dpa.cuda_available():
            raise rf.InputError("--call dpa: DotProductAttention's constructor needs CUDA "
                                "(module/base.py); run it on a GPU runner (tools/te/gpu-te.sh)")
    _progress(f"importing TE from {root}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fattn_te import loader, bridge, record
        try:
            backends = loader.import_backends(root)
        except Exception as e:  # a TE that does not import is bad input, named
            raise rf.InputError(f"--te {root}: importing TE failed: "
                                f"{describe_error(e)[len(ERROR_PREFIX):]}") from e
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
    out_cases, errored, paths = {}, [], {"module": 0, "function": 0}
    ntensors = 0
    all_cases = tree["children"]["cases"]["children"]
    for i, (cid, case) in enumerate(all_cases.items(), 1):
        word = _run_case(backends, cid, case, resolved, call, out_cases, errored, paths)
        ntensors += _count_datasets({"children": out_cases[cid]["children"]})
        progress_line(progress, i, len(all_cases), cid, word)
    from fattn_te import refusal
    refusal.write_log()
    new = {"attrs": sorted(root_attrs, key=lambda a: a[0]),
           "children": {"cases": {"attrs": [], "children": out_cases}}}
    _progress(f"writing {out}")
    rf.write_tree(out, new, fattn=fattn)
    return len(out_cases), ntensors, errored, paths


def _run_case(backends, cid, case, resolved, call, out_cases, errored, paths):
    """One case into out_cases (errored and paths counted); its word for the
    progress line."""
    from fattn_te import record
    attrs = [a for a in case["attrs"] if a[0] != "attrs_digest"]
    if any(a[0] in ("skipped", "refused_rule") for a in attrs):
        # fattn refused it: asked of TE where TE refuses it (refusal.py);
        # recorded as fattn refused it unless TE runs it.
        from fattn_te import refusal
        _progress(f"case {cid} (refused by fattn)")
        try:
            children = refusal.run(backends, cid, resolved[cid], attrs, call)
        except refusal.Mismatch as e:  # TE raised, but not the refusal
            reason = ERROR_PREFIX + str(e)
            errored.append((cid, reason))
            kept = [a for a in attrs if not a[0].startswith("refused_")]
            out_cases[cid] = {"attrs": kept + [("skipped", reason, None)], "children": {}}
            return "ERROR"
        if children is None:
            out_cases[cid] = {"attrs": attrs, "children": {}}
            return "refused"
        attrs = [a for a in attrs if not a[0].startswith("refused_")]
        out_cases[cid] = {"attrs": attrs, "children": children}
        return "ok (fattn refuses it, TE ran it)"
    _progress(f"case {cid}")
    try:
        # a schedule's steps through TE's own code (schedule.py), else one call
        from fattn_te import schedule
        run_one = schedule.run if resolved[cid]["spec"].get("schedule") else record.run_case
        children = run_one(backends, resolved[cid], case, call)
    except Exception as e:  # the case's result (TE's), the run goes on; fattn-te's stops it
        from fattn_te import blame, dpa
        if isinstance(e, dpa.RoutedAway):  # DPA's routing: reported, not run another way
            routed = ROUTED_PREFIX + str(e)
            paths.setdefault("routed", []).append((cid, str(e)))
            out_cases[cid] = {"attrs": attrs + [("skipped", routed, None)], "children": {}}
            return "routed away"
        who, why = blame.classify(e)
        if who == "tool":
            raise blame.ToolError(cid, why) from e
        reason = ERROR_PREFIX + why
        errored.append((cid, reason))
        out_cases[cid] = {"attrs": attrs + [("skipped", reason, None)], "children": {}}
        return "ERROR"
    p = record.case_path(resolved[cid], call)
    paths[p] = paths.get(p, 0) + 1
    if resolved[cid]["spec"].get("fp8"):
        paths.setdefault("fp8", {"module": 0, "function": 0, "dpa": 0})[p] += 1
    if p == "function":
        from fattn_te import module
        why = module.not_expressed(resolved[cid]) if call != "function" else "--call function"
        paths.setdefault("why", {}).setdefault(why, 0)
        paths["why"][why] += 1
    if call == "dpa" and p != "dpa":
        from fattn_te import dpa
        why = dpa.not_through_dpa(resolved[cid])
        paths.setdefault("why_dpa", {}).setdefault(why, 0)
        paths["why_dpa"][why] += 1
    out_cases[cid] = {"attrs": attrs, "children": children}
    return "ok"


def cmd_run_cp(args):
    """fattn-te run --cp-matrix: the CP matrix through TE's context-parallel
    attention in several processes (fattn_te/cp.py)."""
    from fattn_te import cp
    check_output(args.o)
    fattn = rf.find_fattn()
    use_library_of(fattn)
    work = tempfile.mkdtemp(prefix="fattn-te-")
    try:
        root = te_root(args.te, work)
        impl = te_impl(root)
        n, m, errored, counts = cp.run(root, args.backend, args.cases, args.filter, args.o, fattn,
                                       work, impl)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"fattn-te run: wrote {n} case{'' if n == 1 else 's'} ({m} tensor{'' if m == 1 else 's'}) "
          f"of {impl} to {args.o} (context parallelism: {cp.counts_line(counts) or 'none'}; "
          f"{len(errored)} errored)")
    for cid, reason in errored:
        print(f"  {cid}: {reason[len(ERROR_PREFIX):]}")
    return 1 if errored else 0


def cmd_run(args):
    if args.cp_matrix:
        return cmd_run_cp(args)
    check_output(args.o)
    fattn = rf.find_fattn()
    work = tempfile.mkdtemp(prefix="fattn-te-")
    try:
        root = te_root(args.te, work)
        impl = te_impl(root)
        n, m, errored, paths = cmd_run_one(root, args.backend, args.cases, args.filter, args.o,
                                           fattn, args.call, work,
                                           progress_wanted(args.progress))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # under --call dpa the cases DPA is not given go the module's way: counted
    how = (f"{paths.get('module', 0)} through FusedAttention, {paths['function']} through "
           f"FusedAttnFunc.apply" if args.call in ("module", "dpa") else
           f"{paths['function']} through FusedAttnFunc.apply")
    if args.call == "dpa":
        how = (f"{paths.get('dpa', 0)} through DotProductAttention, "
               f"{len(paths.get('routed', []))} routed away from FusedAttention, " + how)
    print(f"fattn-te run: wrote {n} case{'' if n == 1 else 's'} ({m} tensor{'' if m == 1 else 's'}) "
          f"of {impl} to {args.o} ({how}; {len(errored)} errored)")
    if paths.get("why"):
        print("  through FusedAttnFunc.apply: " + ", ".join(
            f"{k} {v}" for k, v in sorted(paths["why"].items())))
    if paths.get("why_dpa"):
        print("  not through DotProductAttention: " + ", ".join(
            f"{k} {v}" for k, v in sorted(paths["why_dpa"].items())))
    for cid, why in paths.get("routed", []):
        print(f"  routed away: {cid}: {why}")
    if paths.get("fp8"):
        print(f"  FP8: {paths['fp8']['module']} through FusedAttention, "
              f"{paths['fp8']['function']} through FusedAttnFunc.apply")
    for cid, reason in errored:
        print(f"  {cid}: {reason[len(ERROR_PREFIX):]}")
    return 1 if errored else 0


def add_cp(p):
    p.add_argument("--cp-matrix", action="store_true",
                   help="the context-parallel matrix (golden/cp_cases.json, or --cases): each "
                        "case in its cp size of local processes through TE's CP attention")


def add_call(p):
    p.add_argument("--call", default="module", choices=["module", "function", "dpa"],
                   help="module: TE's FusedAttention.forward builds FusedAttnFunc's arguments "
                        "(default); function: fattn-te calls FusedAttnFunc.apply itself; dpa: "
                        "TE's DotProductAttention itself (needs CUDA: a GPU runner)")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fattn-te")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run TE's FusedAttnFunc on every case, write a run file")
    te_help = ("a TE release (setup.sh), a wheel file, a directory holding transformer_engine/, "
               "or PATH@REV: a git checkout of TE at a revision")
    progress_help = ("print [17/133] CASE... ok on stderr as each case is done (the default "
                     "when stderr is a terminal)")
    r.add_argument("--te", required=True, help=te_help)
    r.add_argument("--backend", default="cpu", choices=["cpu", "cudnn"])
    r.add_argument("--cases")
    r.add_argument("--filter")
    r.add_argument("-o", required=True)
    r.add_argument("--progress", action="store_true", help=progress_help)
    add_call(r)
    add_cp(r)
    v = sub.add_parser("verify", help="TE A vs TE B, and each against fattn's front end")
    v.add_argument("--te", action="append", required=True, help=te_help + " (twice: A, B)")
    v.add_argument("--backend", default="cpu", choices=["cpu", "cudnn"])
    v.add_argument("--cases")
    v.add_argument("--filter")
    v.add_argument("--keep", help="keep the run files in this directory")
    v.add_argument("--json", help="write the report as JSON (schema fattn-te-verify/1); - for "
                                  "stdout (the text then goes to stderr)")
    v.add_argument("--junit", help="write JUnit XML: one testcase per case and pair; - for "
                                   "stdout")
    v.add_argument("--ref-cache", metavar="DIR",
                   help="keep each TE's run file in DIR and reuse it while its TE tree, the "
                        "fattn build and the matrix are the same")
    v.add_argument("--progress", action="store_true", help=progress_help)
    add_call(v)
    add_cp(v)
    args = ap.parse_args(argv)
    from fattn_te import guard
    # SIGTERM, SIGINT, SIGHUP, SIGQUIT: the temporary folders go (the
    # `finally` blocks), a child is handed the signal and waited for, and
    # fattn-te then dies of the signal (docs/te.md, "Trust and files")
    try:
        with guard.stopping():
            if args.cmd == "run":
                return cmd_run(args)
            if args.cp_matrix:  # the CP matrix's verdict (cp_verify.py)
                from fattn_te import cp_verify
                return cp_verify.main(args)
            from fattn_te import verify
            return verify.main(args)
    except guard.Stopped as e:
        guard.die_of(e.signum)
    except rf.InputError as e:
        print(f"fattn-te: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"fattn-te: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 -- blame.ToolError: fattn-te's own error in a case
        from fattn_te import blame
        if not isinstance(e, blame.ToolError):
            raise
        print(f"fattn-te: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
