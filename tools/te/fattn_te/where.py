"""Where fattn and a TE are: the source tree and its run-file module,
fattn-te's environment, a --te argument as a TE root, a TE root's release
and shape, the libfattn to load, and fattn's own command line. The bottom
of fattn_te's command modules (cli, verify, cp, cp_verify): it imports none
of them."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(SRC, "tools", "python"))
import fattn_runfile as rf  # noqa: E402


def env_dir():
    return os.environ.get("FATTN_TE_ENV", os.path.join(os.path.expanduser("~"), ".cache",
                                                       "fattn-te"))


def _releases():
    d = os.path.join(env_dir(), "te")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


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
        from fattn_te import guard
        root = guard.unpack_wheel(arg, work)  # a folder per content digest
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


def te_roots(te_args, work):
    """Each --te checked (a wheel unpacked, a revision exported into `work`)
    before any TE runs, and its label (te_impl), the --te itself added where
    two TEs would read alike: (roots, names)."""
    roots = [te_root(t, work) for t in te_args]
    names = [te_impl(r) for r in roots]
    if len(set(names)) < len(names):
        names = [f"{n} ({t})" for n, t in zip(names, te_args)]
    return roots, names


def fattn_args(args):
    out = []
    if args.cases:
        out += ["--cases", args.cases]
    if args.filter:
        out += ["--filter", args.filter]
    return out


def run_fattn(fattn, argv):
    from fattn_te import guard
    p = guard.run([fattn] + argv)  # stopped with fattn-te (guard.stopping)
    return p.returncode, p.stdout, p.stderr


def _count_datasets(node):
    if "children" not in node:
        return 1
    return sum(_count_datasets(c) for c in node["children"].values())


def progress_line(on, i, n, cid, word):
    """`[17/133] CASE... ok` on stderr, as fattn's commands print them."""
    if on:
        sys.stderr.write(f"[{i}/{n}] {cid}... {word}\n")
        sys.stderr.flush()


def progress_wanted(flag):
    """--progress, or stderr a terminal (fattn's rule: never otherwise)."""
    return bool(flag) or sys.stderr.isatty()


def check_output(path):
    """-o is checked before any work (as fattn's commands do): its directory
    must exist and the target must be absent or a regular file, not a
    symbolic link (guard.check_target)."""
    from fattn_te import guard
    guard.check_target(path)
    d = rf.target_dir(path)
    if not os.path.isdir(d):
        raise rf.InputError(f"{path}: directory {d} does not exist")


# A case that raised is recorded as skipped with a reason that starts so
# (docs/te.md, "Errors per case"); verify counts them by it.
ERROR_PREFIX = "fattn-te: "
# A case DotProductAttention routes away from FusedAttention (--call dpa):
# recorded as skipped with a reason that starts so; not an error, not compared.
ROUTED_PREFIX = "fattn-te: routed away: "


def is_refactored(root):
    """Whether the TE at root is the merged refactor (its backends.py has
    FusedAttnFwdArgs) rather than the monolith, read from the source
    without importing TE."""
    path = os.path.join(root, "transformer_engine", "pytorch", "attention",
                        "dot_product_attention", "backends.py")
    with open(path, encoding="utf-8") as f:
        return "class FusedAttnFwdArgs" in f.read()
