"""fattn-te verify --ref-cache DIR: a TE's run file kept and reused while
nothing it depends on changed, so that a TE developer's edit-verify loop
runs the unchanged reference TE once (docs/te.md, "Verify for CI").

The key is a SHA-256 over what makes the run file's bytes:
  - the TE tree: every file below transformer_engine/ (path and bytes;
    bytecode caches left out, as importing writes them),
  - the fattn build: the fattn executable and the libfattn the bridge loads,
  - fattn-te itself: its Python modules and tools/python/fattn_runfile.py,
  - the matrix: `fattn cases --resolved --json` of the selection,
  - the backend, the call path, SOURCE_DATE_EPOCH and the TE's label.
An entry is <key>.h5 (the run file), <key>-refusals.json (TE's answers to
fattn's refusals) and <key>.json (how the run's cases went), written under
temporary names and renamed, the .json last: an entry without it is not
one."""
import hashlib
import json
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def _hash_tree(h, root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            p = os.path.join(dirpath, name)
            h.update(os.path.relpath(p, root).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
            h.update(b"\0")


def _hash_file(h, path):
    h.update(path.encode() + b"\0" if path else b"-\0")
    if path and os.path.isfile(path):
        with open(path, "rb") as f:
            h.update(f.read())


def key(te_root, label, fattn, lib, args):
    """The entry name for TE tree te_root (recorded as `label`) run with
    fattn (and lib) over the selection args names (cases, filter, backend,
    call)."""
    h = hashlib.sha256(b"fattn-te-ref/1\0" + label.encode() + b"\0")
    _hash_tree(h, os.path.join(te_root, "transformer_engine"))
    _hash_file(h, os.path.realpath(fattn))
    _hash_file(h, os.path.realpath(lib) if lib else None)
    for name in sorted(os.listdir(HERE)):
        if name.endswith(".py"):
            _hash_file(h, os.path.join(HERE, name))
    _hash_file(h, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python",
                               "fattn_runfile.py"))
    argv = [fattn, "cases", "--resolved", "--json"]
    if args.cases:
        argv += ["--cases", args.cases]
    if args.filter:
        argv += ["--filter", args.filter]
    p = subprocess.run(argv, capture_output=True)
    h.update(b"matrix\0" + p.stdout + b"\0" + str(p.returncode).encode())
    h.update(f"\0{args.backend}\0{args.call}\0{os.environ.get('SOURCE_DATE_EPOCH', '')}".encode())
    return h.hexdigest()[:32]


def lookup(cache, k):
    """(run file, refusals file, run info) of entry k, or None."""
    base = os.path.join(cache, k)
    try:
        with open(base + ".json", encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    if not (os.path.isfile(base + ".h5") and os.path.isfile(base + "-refusals.json")):
        return None
    return base + ".h5", base + "-refusals.json", info


def _put(src, dst):
    tmp = dst + f".tmp-{os.getpid()}"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def store(cache, k, run_file, refusals_file, info):
    """Keep a run as entry k (the files copied; info last)."""
    os.makedirs(cache, exist_ok=True)
    base = os.path.join(cache, k)
    _put(run_file, base + ".h5")
    _put(refusals_file, base + "-refusals.json")
    tmp = base + f".json.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(info, f)
    os.replace(tmp, base + ".json")
