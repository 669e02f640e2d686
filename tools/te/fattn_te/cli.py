"""fattn-te: TE's own FusedAttnFunc through fattn's harness (docs/te.md)."""
import argparse
import faulthandler
import os
import shutil
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


def _releases():
    d = os.path.join(env_dir(), "te")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def _unpack_wheel(path, work):
    """A TE wheel file unpacked into the run's temporary folder (a wheel is
    a zip archive; nothing of it is installed)."""
    import zipfile
    dest = os.path.join(work, "wheel-" + os.path.basename(path)[:-len(".whl")])
    if not os.path.isdir(dest):
        try:
            with zipfile.ZipFile(path) as z:
                z.extractall(dest)
        except (OSError, zipfile.BadZipFile) as e:
            raise rf.InputError(f"--te {path}: not a readable wheel ({e})")
    return dest


def _git(path, *argv):
    """git -C path argv..., its stdout; InputError naming what failed (git
    missing said as such)."""
    try:
        p = subprocess.run(["git", "-C", path] + list(argv), capture_output=True, text=True)
    except FileNotFoundError:
        raise rf.InputError("git is not installed (apt-get install git), and --te PATH@REV "
                            "needs it")
    if p.returncode != 0:
        raise rf.InputError(f"git -C {path} {' '.join(argv)}: {p.stderr.strip() or p.returncode}")
    return p.stdout


# PATH@REV checkouts made by te_root: root -> label
_CHECKOUTS = {}


def _checkout(path, rev, work):
    """--te PATH@REV: TE's tree at REV of the git checkout PATH, exported
    into the run's temporary folder (git archive: nothing is written into
    PATH's repository), labelled by its VERSION.txt and short revision."""
    if work is None:
        raise rf.InputError(f"--te {path}@{rev}: a revision needs a temporary folder")
    full = _git(path, "rev-parse", "--verify", "--quiet", rev + "^{commit}").strip()
    short = _git(path, "rev-parse", "--short", full).strip()
    dest = os.path.join(work, "te-" + short)
    if not os.path.isdir(dest):
        os.makedirs(dest)
        arch = subprocess.run(["git", "-C", path, "archive", "--format=tar", full],
                              capture_output=True)
        if arch.returncode != 0:
            raise rf.InputError(f"git archive {rev} of {path}: {arch.stderr.decode().strip()}")
        import io
        import tarfile
        with tarfile.open(fileobj=io.BytesIO(arch.stdout)) as t:
            t.extractall(dest, filter="data") if hasattr(tarfile, "data_filter") else \
                t.extractall(dest)
    _CHECKOUTS[os.path.abspath(dest)] = f"te-{_version_txt(dest)}+{short}"
    return dest


def _version_txt(root):
    vf = os.path.join(root, "build_tools", "VERSION.txt")
    return open(vf).read().strip() if os.path.isfile(vf) else "source"


def te_root(arg, work=None):
    """--te VERSION (a release setup.sh unpacked), a TE wheel file (unpacked
    into `work`), a directory holding transformer_engine/ (an unpacked wheel,
    a source checkout), the transformer_engine/ directory itself, or PATH@REV
    (a git checkout at a revision, exported into `work`): the directory
    holding transformer_engine/, checked to hold TE's backends module.
    InputError saying what --te takes otherwise."""
    from fattn_te import loader
    root = None
    at = arg.rfind("@")
    if at > 0 and not os.path.exists(arg) and os.path.isdir(arg[:at]):
        root = _checkout(arg[:at], arg[at + 1:], work)
    elif os.path.isfile(arg) and arg.endswith(".whl"):
        if work is None:
            raise rf.InputError(f"--te {arg}: a wheel needs a temporary folder to unpack into")
        root = _unpack_wheel(arg, work)
    elif os.path.isdir(arg):
        a = os.path.abspath(arg)
        inner = os.path.basename(a.rstrip("/")) == "transformer_engine" and os.path.isdir(
            os.path.join(a, "pytorch"))
        root = os.path.dirname(a.rstrip("/")) if inner else a
    elif os.path.isdir(os.path.join(env_dir(), "te", arg)):
        root = os.path.join(env_dir(), "te", arg)
    if root is not None:
        try:
            return loader.te_package_dir(root)
        except loader.TEImportError:
            pass
    have = ", ".join(_releases()) or "none"
    raise rf.InputError(
        f"--te {arg}: takes a TE release that tools/te/setup.sh unpacked (in {env_dir()}/te: "
        f"{have}; `tools/te/setup.sh VERSION` adds one), a TE wheel file "
        f"(transformer_engine-VERSION-py3-none-any.whl), a directory holding "
        f"transformer_engine/ (an unpacked wheel or a source checkout), that "
        f"transformer_engine/ directory, or PATH@REV (a git checkout at a revision); each needs "
        f"transformer_engine/pytorch/attention/dot_product_attention/backends.py")


def use_library_of(fattn):
    """The libfattn.so the bridge loads is the one built with `fattn` (its
    build's lib/), unless $FATTN_LIB names one: a second build*/ of the
    tree must not mix its engine with another build's harness."""
    if os.environ.get("FATTN_LIB"):
        return
    build = os.path.dirname(os.path.dirname(os.path.realpath(fattn)))
    lib = os.path.join(build, "lib", "libfattn.so")
    if os.path.isfile(lib):
        os.environ["FATTN_LIB"] = lib


def te_impl(root):
    """te-<version> of a wheel (its dist-info); of a source tree te-<its
    build_tools/VERSION.txt, else "source">, with +<short revision> (and
    -dirty for uncommitted changes) when it is a git checkout: the version
    TE says it is, not the last tag git describe finds on a branch."""
    if os.path.abspath(root) in _CHECKOUTS:
        return _CHECKOUTS[os.path.abspath(root)]
    for name in sorted(os.listdir(root)):
        if name.startswith("transformer_engine-") and name.endswith(".dist-info"):
            return "te-" + name[len("transformer_engine-"):-len(".dist-info")]
    label = "te-" + _version_txt(root)
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout.strip()
        if rev:
            label += f"+{rev}{'-dirty' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        pass
    return label


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


# A case that raised is recorded as skipped with a reason that starts so
# (docs/te.md, "Errors per case"); verify counts them by it.
ERROR_PREFIX = "fattn-te: "


def describe_error(e):
    """A case's error as its recorded reason, saying who raised it
    (blame.py): TE, with the TE line it came from, or TE's hand-off;
    fattn-te's own errors are not recorded (blame.ToolError)."""
    from fattn_te import blame
    return ERROR_PREFIX + blame.classify(e)[1]


def progress_line(on, i, n, cid, word):
    """`[17/133] CASE... ok` on stderr, as fattn's commands print them."""
    if on:
        sys.stderr.write(f"[{i}/{n}] {cid}... {word}\n")
        sys.stderr.flush()


def progress_wanted(flag):
    """--progress, or stderr a terminal (fattn's rule: never otherwise)."""
    return bool(flag) or sys.stderr.isatty()


def cmd_run_one(root, backend, cases, filt, out, fattn, call="module", work=None,
                progress=False):
    """One TE run in this process; returns (cases, tensors, errored, paths):
    errored a list of (case id, reason); paths counts the cases by path, and
    under "why" those through FusedAttnFunc.apply by reason."""
    _trace_stalls()
    use_library_of(fattn)
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
        children = record.run_case(backends, resolved[cid], case, call)
    except Exception as e:  # the case's result (TE's), the run goes on; fattn-te's stops it
        from fattn_te import blame
        who, why = blame.classify(e)
        if who == "tool":
            raise blame.ToolError(cid, why) from e
        reason = ERROR_PREFIX + why
        errored.append((cid, reason))
        out_cases[cid] = {"attrs": attrs + [("skipped", reason, None)], "children": {}}
        return "ERROR"
    p = record.case_path(resolved[cid], call)
    paths[p] += 1
    if resolved[cid]["spec"].get("fp8"):
        paths.setdefault("fp8", {"module": 0, "function": 0})[p] += 1
    if p == "function":
        from fattn_te import module
        why = module.not_expressed(resolved[cid]) if call == "module" else "--call function"
        paths.setdefault("why", {}).setdefault(why, 0)
        paths["why"][why] += 1
    out_cases[cid] = {"attrs": attrs, "children": children}
    return "ok"


def check_output(path):
    """-o is checked before any work (as fattn's commands do): its directory
    must exist and the target must be absent or a regular file."""
    d = rf.target_dir(path)
    if not os.path.isdir(d):
        raise rf.InputError(f"{path}: directory {d} does not exist")


def cmd_run(args):
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
    how = (f"{paths['module']} through FusedAttention, {paths['function']} through "
           f"FusedAttnFunc.apply" if args.call == "module" else
           f"{paths['function']} through FusedAttnFunc.apply")
    print(f"fattn-te run: wrote {n} case{'' if n == 1 else 's'} ({m} tensor{'' if m == 1 else 's'}) "
          f"of {impl} to {args.o} ({how}; {len(errored)} errored)")
    if paths.get("why"):
        print("  through FusedAttnFunc.apply: " + ", ".join(
            f"{k} {v}" for k, v in sorted(paths["why"].items())))
    if paths.get("fp8"):
        print(f"  FP8: {paths['fp8']['module']} through FusedAttention, "
              f"{paths['fp8']['function']} through FusedAttnFunc.apply")
    for cid, reason in errored:
        print(f"  {cid}: {reason[len(ERROR_PREFIX):]}")
    return 1 if errored else 0


def add_call(p):
    p.add_argument("--call", default="module", choices=["module", "function"],
                   help="module: TE's FusedAttention.forward builds FusedAttnFunc's arguments "
                        "(default); function: fattn-te calls FusedAttnFunc.apply itself")


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
    except Exception as e:  # noqa: BLE001 -- blame.ToolError: fattn-te's own error in a case
        from fattn_te import blame
        if not isinstance(e, blame.ToolError):
            raise
        print(f"fattn-te: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
