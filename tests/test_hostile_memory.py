#!/usr/bin/python3
"""Memory bounds of the fattn CLI (docs/reliability.md, Memory).

usage: test_hostile_memory.py FATTN_EXE BAD_DIR SANITIZED   (prints TAP)

 - run streams each finished case to the run file and frees it: the peak
   RSS of several mid-size cases under --max-memory stays within the bound
   plus a fixed allowance, with and without --repeat (whose cases go through
   a scratch file), and the files are the same bytes whatever order the
   cases are listed in;
 - a write failing in either phase of an audit run leaves neither the
   output nor a temporary or scratch file;
 - replay takes --max-memory like run (same parsing, same message) and
   refuses, before allocating, a case whose estimated peak is larger,
   naming it: also one whose recorded save_ctx max_seqlen is far beyond its
   tensors (BAD_DIR/memory/memory-*.h5, made by BAD_DIR/make_memory.py; valid
   for inspect, hence not among the BAD_DIR/*.h5 every command refuses);
 - golden writes each golden as it is made (peak RSS of four cases within
   a fixed allowance of one's; the same bytes in any listing order); merge
   holds one input and one case (peak RSS of six shards within the same
   allowance of one's), merges shards to the unsharded run's bytes and
   leaves nothing on a full disk.

Peak RSS is the fattn process's own (os.wait4 in a small spawning interpreter). Under the sanitizers (SANITIZED=1)
RSS measures ASan's quarantine and shadow memory rather than what fattn
holds, so those two assertions report a skip with that reason; the commands
still run and their files are checked. Needs h5py and numpy (Debian
python3-h5py); without them the test skips, except under CI=true.
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py = tap.need_modules("h5py")

FATTN, BAD_DIR = sys.argv[1], sys.argv[2]
SANITIZED = sys.argv[3] == "1"
TMP = tempfile.mkdtemp(prefix="fattn-mem-")
RESULTS = tap.Tests()
case = RESULTS.case
AS_LIMIT = 2 << 30
ASAN_SKIP = ("SKIP sanitizer build: ASan's quarantine keeps freed memory resident and its "
             "shadow adds to RSS, so RSS does not measure what fattn holds")

# Six mid-size cases: about 12.5 MB of recorded tensors each (1 MiB per
# bfloat16 tensor), an estimated peak of about 26.5 MB each (fattn run's
# estimate), and little arithmetic (sequences of 32), so they run in about
# a second. Held all at once they need over 90 MB.
MID = [{"id": "mem.%02d" % i, "b": 32, "h": 4, "sq": 32, "skv": 32, "d_qk": 128,
        "dtype": "bfloat16", "seed": i} for i in range(6)]
MID_MAX_MEMORY = 30000000
# With --repeat a second run of a case is held beside the first while it is
# compared (a 40 MB estimate each), so that run gets a bound of its own.
MID_MAX_MEMORY_AUDITED = 45000000
# What a process of fattn holds besides its cases: code, libhdf5, the
# engine's threads and the allocator's slack (a run of one tiny case peaks
# at about 13 MB; one of these cases alone at about 34 MB).
ALLOWANCE = 24 << 20

TINY = [
    {"id": "m.bshd.causal.f32", "b": 1, "h": 1, "sq": 2, "skv": 3, "d_qk": 8,
     "dtype": "float32", "mask": "causal", "seed": 3},
    {"id": "m.thd.padding.bf16", "b": 2, "h": 1, "sq": 3, "skv": 3, "d_qk": 8,
     "layout": "thd_thd_thd", "mask": "padding", "pad_between_seqs": True,
     "seqlens_q": [2, 1], "seqlens_kv": [3, 1]},
    {"id": "m.a.first", "b": 1, "h": 2, "sq": 4, "d_qk": 8, "seed": 5},
]


def path(*names):
    return os.path.join(TMP, *names)


def limits(as_limit=True, fsize=None):
    def apply():
        if as_limit and not SANITIZED:
            resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
        if fsize is not None:
            # A full disk: write(2) fails with EFBIG instead of a signal.
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return apply


# The measured fattn is started by this small interpreter, not by the test
# itself: a process's peak RSS (ru_maxrss) survives exec, so a fattn forked
# straight from this test would report the test's own RSS as its floor.
# Prints "<exit code> <peak RSS in KiB>" (exit -N: signal N).
SPAWN = r"""
import os, sys
pid = os.fork()
if pid == 0:
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.execv(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)
"""


def run(*args, check=None, fsize=None, as_limit=True):
    """fattn ARGS; returns (exit code, stderr, the fattn process's peak RSS
    in bytes)."""
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    p = subprocess.run([sys.executable, "-S", "-c", SPAWN, FATTN] + list(args),
                       capture_output=True, text=True, env=env,
                       preexec_fn=limits(as_limit, fsize))
    try:
        rc, rss_kib = (int(x) for x in p.stdout.split())
    except ValueError:
        raise AssertionError("fattn %s: no exit status from the spawner (%d)\n%s%s"
                             % (" ".join(args), p.returncode, p.stdout, p.stderr))
    if rc < 0:
        raise AssertionError("fattn %s died of signal %d\n%s" % (" ".join(args), -rc, p.stderr))
    if check is not None and rc != check:
        raise AssertionError("fattn %s: exit %d, want %d\n%s"
                             % (" ".join(args), rc, check, p.stderr))
    return rc, p.stderr, rss_kib * 1024


def write_cases(name, cases):
    p = path(name)
    with open(p, "w") as f:
        json.dump(cases, f)
    return p


def read(p):
    with open(p, "rb") as f:
        return f.read()


def listing(d):
    return sorted(os.listdir(d))


def fresh_dir(name):
    d = path(name)
    os.mkdir(d)
    return d


TINY_SPEC = path("tiny.json")
GOOD = path("good.h5")


def setup():
    write_cases("tiny.json", TINY)
    run("run", "--backend", "cpu", "--cases", TINY_SPEC, "-o", GOOD, check=0)


# ---- run: one case at a time ------------------------------------------------------

def rss_test(extra):
    spec = write_cases("mid.json", MID)
    d = fresh_dir("rss" + "".join(extra).replace("-", "_"))
    out = os.path.join(d, "out.h5")
    bound = MID_MAX_MEMORY_AUDITED if extra else MID_MAX_MEMORY
    _, _, rss = run("run", "--backend", "cpu", "--cases", spec, "--max-memory",
                    str(bound), *extra, "-o", out, check=0)
    run("inspect", out, check=0)
    with h5py.File(out, "r") as f:
        assert sorted(f["cases"]) == [c["id"] for c in MID], list(f["cases"])
        if extra:
            assert sorted(f["audit"]) == [c["id"] for c in MID], list(f["audit"])
    assert listing(d) == ["out.h5"], listing(d)
    if SANITIZED:
        return ASAN_SKIP
    assert rss <= bound + ALLOWANCE, ("peak RSS %d bytes > --max-memory %d + allowance %d: the "
                                      "run holds more than one case" % (rss, bound, ALLOWANCE))
    return None


@case("run: 6 mid-size cases under --max-memory peak within the bound plus a fixed allowance")
def _():
    return rss_test([])


@case("run --repeat 2: 6 mid-size cases (through the scratch file) peak within the bound too")
def _():
    return rss_test(["--repeat", "2"])


@case("run --repeat 2: the estimate counts the repeat held beside the first run")
def _():
    spec = write_cases("mid-one.json", MID[:1])
    _, err, _ = run("run", "--backend", "cpu", "--cases", spec, "--max-memory",
                    str(MID_MAX_MEMORY), "--repeat", "2", "-o", path("nope.h5"), check=2)
    assert "case mem.00: estimated peak" in err and "--max-memory %d" % MID_MAX_MEMORY in err, err
    assert not os.path.exists(path("nope.h5"))


@case("run: the same bytes whatever order --cases lists the cases in")
def _():
    rev = write_cases("tiny-rev.json", list(reversed(TINY)))
    for extra in ([], ["--repeat", "2", "--check-writes"], ["--impl", "legacy"]):
        a, b = path("order-a.h5"), path("order-b.h5")
        run("run", "--backend", "cpu", "--cases", TINY_SPEC, *extra, "-o", a, check=0)
        run("run", "--backend", "cpu", "--cases", rev, *extra, "-o", b, check=0)
        assert read(a) == read(b), "%s: files differ" % " ".join(extra)
        run("inspect", b, check=0)


@case("run: a filter matching no case is exit 2 naming the filter, nothing written")
def _():
    out = path("empty.h5")
    for extra in ([], ["--repeat", "2"]):
        rc, err, _ = run("run", "--backend", "cpu", "--cases", TINY_SPEC, "--filter", "nothing*",
                         *extra, "-o", out, check=2)
        assert "no case matches --filter 'nothing*'" in err, err
        assert not os.path.exists(out), "a run of no case wrote %s" % out


@case("run --repeat 2 --check-writes: a full disk while writing the cases or while copying "
      "them after /audit: exit 2, no output, no temporary or scratch file")
def _():
    d = fresh_dir("fsize")
    plain, audited = os.path.join(d, "plain.h5"), os.path.join(d, "audited.h5")
    run("run", "--backend", "cpu", "--cases", TINY_SPEC, "-o", plain, check=0)
    run("run", "--backend", "cpu", "--cases", TINY_SPEC, "--repeat", "2", "--check-writes",
        "-o", audited, check=0)
    n_plain, n_audit = os.path.getsize(plain), os.path.getsize(audited)
    assert n_audit > n_plain + 4096, (n_plain, n_audit)
    os.unlink(plain)
    os.unlink(audited)
    # the scratch file (the cases alone) is about plain's size: limits below
    # it fail while writing it, limits between fail while copying
    for fsize in (n_plain // 3, (n_plain + n_audit) // 2):
        out = os.path.join(d, "out.h5")
        rc, err, _ = run("run", "--backend", "cpu", "--cases", TINY_SPEC, "--repeat", "2",
                         "--check-writes", "-o", out, fsize=fsize)
        assert rc == 2, "fsize %d: exit %d\n%s" % (fsize, rc, err)
        assert "out.h5" in err, err
        assert listing(d) == [], "fsize %d: left %s" % (fsize, listing(d))


# ---- replay --max-memory ------------------------------------------------------------

@case("replay --help documents --max-memory")
def _():
    p = subprocess.run([FATTN, "replay", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "--max-memory BYTES" in p.stdout, p.stdout


@case("replay --max-memory: parsed as run parses it, with the same message")
def _():
    for bad in ("-5", "0", "12x", ""):
        _, e_run, _ = run("run", "--backend", "cpu", "--cases", TINY_SPEC, "--max-memory", bad,
                          "-o", path("nope.h5"), check=2)
        _, e_rep, _ = run("replay", GOOD, "--from", "save_ctx", "--impl", "split",
                          "--backend", "cpu", "--max-memory", bad, "-o", path("nope.h5"),
                          check=2)
        assert e_rep == e_run.replace("fattn run:", "fattn replay:"), (e_run, e_rep)
        assert not os.path.exists(path("nope.h5"))


def mid_file():
    """A run file of two MID cases (about 25 MB of datasets), made once."""
    p = path("mid2.h5")
    if not os.path.exists(p):
        run("run", "--backend", "cpu", "--cases", write_cases("mid2.json", MID[:2]), "-o", p,
            check=0)
    return p


@case("replay: a case whose estimated peak (the case and the file held whole) exceeds "
      "--max-memory is refused, exit 2 naming it, nothing written")
def _():
    d = fresh_dir("replay-bound")
    out = os.path.join(d, "out.h5")
    for frm in ("save_ctx", "forward"):
        _, err, _ = run("replay", mid_file(), "--from", frm, "--impl", "split", "--backend",
                        "cpu", "--max-memory", "30000000", "-o", out, check=2)
        assert "case mem.00: estimated peak" in err and "--max-memory 30000000" in err, err
        assert listing(d) == [], listing(d)
    # a file whose attributes alone are over the bound: refused before they are read
    _, err, _ = run("replay", GOOD, "--from", "save_ctx", "--impl", "split", "--backend", "cpu",
                    "--max-memory", "1000", "-o", out, check=2)
    assert GOOD in err and "over --max-memory 1000" in err and "before its attributes" in err, err
    # a bound every case fits in replays them all
    run("replay", GOOD, "--from", "save_ctx", "--impl", "split", "--backend", "cpu",
        "--max-memory", "100000000", "-o", out, check=0)
    run("inspect", out, check=0)


@case("replay memory-thd-max-seqlen.h5 (save_ctx max_seqlen 2^26 over lengths of 3): refused "
      "naming the case before allocating, exit 2, nothing written")
def _():
    bad = os.path.join(BAD_DIR, "memory", "memory-thd-max-seqlen.h5")
    d = fresh_dir("replay-seqlen")
    out = os.path.join(d, "out.h5")
    for impl in ("split", "legacy"):
        _, err, rss = run("replay", bad, "--from", "save_ctx", "--impl", impl, "--backend",
                          "cpu", "--max-memory", "100000000", "-o", out, check=2)
        assert "memory-thd-max-seqlen.h5" in err and "memory.thd.max_seqlen" in err, err
        assert listing(d) == [], listing(d)
        if not SANITIZED:
            assert rss < 100000000, "peak RSS %d: allocated before refusing" % rss


def flipped_copy(src, dst, dataset):
    """dst: a copy of src with the first data byte of `dataset` flipped (its
    digest no longer matches: corrupt to any reader that loads the data)."""
    import numpy as np
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        ds = f[dataset]
        raw = ds[()].view(np.uint8).copy()
        raw.flat[0] ^= 1
        ds[...] = raw.view(ds.dtype)
    return dst


@case("replay --max-memory: refused from the cases' attributes before the file's data is read")
def _():
    # the data of this copy is corrupt: a replay that loads the file before
    # its estimate says so; one that estimates first refuses by the bound
    d = fresh_dir("replay-early")
    bad = flipped_copy(mid_file(), os.path.join(d, "flipped.h5"), "cases/mem.00/forward/out")
    out = os.path.join(d, "out.h5")
    _, err, _ = run("replay", bad, "--from", "save_ctx", "--impl", "split", "--backend", "cpu",
                    "--max-memory", "30000000", "-o", out, check=2)
    assert "estimated peak" in err and "corrupt" not in err, err
    assert not os.path.exists(out)
    _, err, _ = run("replay", bad, "--from", "save_ctx", "--impl", "split", "--backend", "cpu",
                    "-o", out, check=2)
    assert "corrupt" in err, err


@case("inspect and merge --max-memory: a file of large datasets refused before its data is read")
def _():
    d = fresh_dir("inspect-merge-early")
    big = mid_file()  # about 25 MB of datasets
    # the same with one data byte flipped: a command that reads the data
    # before its bound says "corrupt"; one that bounds first refuses by size
    bad = flipped_copy(big, os.path.join(d, "flipped.h5"), "cases/mem.00/forward/out")
    _, _, base = run("inspect", GOOD, check=0)  # fattn's own floor
    out = os.path.join(d, "out.h5")
    for args in (["inspect", "--max-memory", "10000000", bad],
                 ["merge", "--max-memory", "10000000", "-o", out, bad]):
        _, err, rss = run(*args, check=2)
        assert "over --max-memory 10000000" in err and bad in err and "corrupt" not in err, err
        assert not os.path.exists(out)
        if not SANITIZED:
            assert rss <= base + (8 << 20), (
                "%s: peak RSS %d, %d for a tiny file: the data was read before the bound"
                % (args[0], rss, base))
    _, err, _ = run("inspect", bad, check=2)  # the default bound: half the RAM
    assert "corrupt" in err, err
    run("inspect", "--max-memory", "100000000", big, check=0)
    run("merge", "--max-memory", "100000000", "-o", out, big, check=0)
    for bad_value in ("0", "inf", "0x10"):
        run("inspect", "--max-memory", bad_value, big, check=2)
        run("merge", "--max-memory", bad_value, "-o", out, big, check=2)


# ---- estimates that count everything (paged containers, attributes, copies) ---------

# A paged case whose page containers [num_pages, page_size, hg, d] are what
# its memory is: 1.6 million pages of 16 positions, 410 MB for K and V each,
# where b * skv * hg * d (what the estimate counted) is 256 bytes. run once
# peaked at 614 MB under --max-memory 20000000 and wrote a 410 MB file.
PAGED_BIG = {"id": "mem.paged.big", "b": 1, "h": 1, "sq": 1, "skv": 16, "d_qk": 8,
             "dtype": "bfloat16", "layout": "paged_kv_bshd_bshd_bshd", "mask": "padding",
             "is_training": False, "paged": {"page_size": 16, "num_pages": 1600000}}
PAGED_BOUND = "20000000"
# fattn's own floor: a process of fattn reading a tiny file peaks near 13 MB
REFUSED_EARLY = 40 << 20


def paged_small_file():
    """A run of PAGED_BIG with 2 pages (valid and tiny), its spec then edited
    to say 1.6 million: replay's estimate comes from the spec, before the
    file's data is read (attrs_digest removed so that no digest stands in
    the way of the edit, as files written before it have none)."""
    p = path("paged-edited.h5")
    if os.path.exists(p):
        return p
    small = dict(PAGED_BIG, paged={"page_size": 16, "num_pages": 2})
    run("run", "--backend", "cpu", "--cases", write_cases("paged-small.json", [small]), "-o", p,
        check=0)
    with h5py.File(p, "r+") as f:
        g = f["cases/mem.paged.big"]
        spec = json.loads(g.attrs["spec"])
        spec["paged"]["num_pages"] = PAGED_BIG["paged"]["num_pages"]
        g.attrs["spec"] = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        del g.attrs["attrs_digest"]
    return p


@case("run and replay of a paged case under --max-memory 20000000: its page containers are "
      "counted, refused before allocating, nothing written")
def _():
    d = fresh_dir("paged")
    out = os.path.join(d, "out.h5")
    spec = write_cases("paged-big.json", [PAGED_BIG])
    _, err, rss_run = run("run", "--backend", "cpu", "--cases", spec, "--max-memory", PAGED_BOUND,
                          "-o", out, check=2)
    assert "case mem.paged.big: estimated peak" in err and "--max-memory " + PAGED_BOUND in err, err
    _, err, rss_rep = run("replay", paged_small_file(), "--from", "save_ctx", "--impl", "split",
                          "--backend", "cpu", "--max-memory", PAGED_BOUND, "-o", out, check=2)
    assert "case mem.paged.big: estimated peak" in err and "--max-memory " + PAGED_BOUND in err, err
    assert listing(d) == [], listing(d)
    print("# measured: peak RSS run %d KiB, replay %d KiB" % (rss_run >> 10, rss_rep >> 10))
    if not SANITIZED:
        assert rss_run < REFUSED_EARLY and rss_rep < REFUSED_EARLY, (rss_run, rss_rep)


def big_attribute_file():
    """GOOD with a 12 MB root attribute (provenance, covered by no digest):
    its datasets are a few KB, its text all but the whole file."""
    p = path("big-attr.h5")
    if not os.path.exists(p):
        shutil.copy(GOOD, p)
        with h5py.File(p, "r+") as f:
            f.attrs["prov_note"] = "x" * (12 << 20)
    return p


@case("a 12 MB attribute under --max-memory 10000000: inspect, merge, replay, diff, report "
      "and load_tree count its text and refuse before reading it")
def _():
    big = big_attribute_file()
    d = fresh_dir("big-attr")
    out = os.path.join(d, "out")
    for args in (["inspect", "--max-memory", "10000000", big],
                 ["merge", "--max-memory", "10000000", "-o", out, big],
                 ["replay", big, "--from", "save_ctx", "--impl", "split", "--backend", "cpu",
                  "--max-memory", "10000000", "-o", out],
                 ["diff", big, GOOD, "--max-memory", "10000000"],
                 ["report", GOOD, big, "--max-memory", "10000000", "-o", out]):
        _, err, rss = run(*args, check=2)
        assert big in err and "--max-memory 10000000" in err and "attribute text up to" in err, \
            (args[0], err)
        assert listing(d) == [], (args[0], listing(d))
        if not SANITIZED:
            assert rss < REFUSED_EARLY, "%s: peak RSS %d: the attribute was read" % (args[0], rss)
    # within the bound: valid, and the page that shows it is counted too
    run("inspect", "--max-memory", "100000000", big, check=0)
    _, err, _ = run("report", GOOD, big, "--max-memory", "150000000", "-o", out, check=2)
    assert "the page holds an estimated" in err, err
    assert listing(d) == [], listing(d)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(BAD_DIR)))), "tools", "python"))
    import fattn_runfile
    try:
        fattn_runfile.load_tree(big, max_bytes=10000000)
        raise AssertionError("load_tree read a 12 MB attribute under a 10 MB bound")
    except fattn_runfile.InputError as e:
        assert "attribute text up to" in str(e) and "refused before reading" in str(e), str(e)


@case("verify --cases and golden --cases: a case over --max-memory is refused at once, naming "
      "it, the estimate and the bound; nothing written")
def _():
    hostile = os.path.join(BAD_DIR, "spec-hostile-size.json")
    d = path("golden-hostile")
    for args in (["verify", "--backend", "cpu", "--cases", hostile],
                 ["golden", "--backend", "cpu", "--cases", hostile, "--allow-dirty", "-o", d]):
        _, err, rss = run(*args, check=2)
        assert "estimated peak" in err and "exceeds --max-memory" in err and "case " in err, err
        if not SANITIZED:
            assert rss < REFUSED_EARLY, "%s: peak RSS %d" % (args[0], rss)
    assert not os.path.exists(d), "golden left %s" % d
    # verify keeps every case's two runs for its report: six MID cases are
    # counted as six, not one
    spec = write_cases("mid.json", MID)
    _, err, _ = run("verify", "--backend", "cpu", "--cases", spec, "--max-memory", "100000000",
                    check=2)
    assert "the 6 selected cases: estimated peak" in err, err


# ---- golden and merge ---------------------------------------------------------------

# Each golden keeps a case's outputs (about 4.5 MB for a MID case); a
# golden run checks each case through both front ends and its repeats
# (about 1.3 s for a MID case here).
GOLDEN_GROWTH = 8 << 20


@case("golden: peak RSS of 4 mid-size cases within a fixed allowance of one case's")
def _():
    if SANITIZED:
        return ASAN_SKIP
    rss = []
    for n in (1, 4):
        spec = write_cases("golden-mid-%d.json" % n, MID[:n])
        d = path("golden-mid-%d" % n)
        _, _, peak = run("golden", "--backend", "cpu", "--cases", spec, "--allow-dirty", "-o", d,
                         check=0)
        rss.append(peak)
        shutil.rmtree(d)
    assert rss[1] - rss[0] <= GOLDEN_GROWTH, (
        "peak RSS %d bytes for 4 cases, %d for 1: golden holds more than one case"
        % (rss[1], rss[0]))


@case("golden: the same bytes whatever order --cases lists the cases in")
def _():
    rev = write_cases("tiny-rev.json", list(reversed(TINY)))
    a, b = fresh_dir("golden-a"), fresh_dir("golden-b")
    run("golden", "--backend", "cpu", "--cases", TINY_SPEC, "--allow-dirty", "-o", a, check=0)
    run("golden", "--backend", "cpu", "--cases", rev, "--allow-dirty", "-o", b, check=0)
    (fa,), (fb,) = listing(a), listing(b)
    assert fa == fb and read(os.path.join(a, fa)) == read(os.path.join(b, fb)), (fa, fb)


@case("merge: peak RSS of 6 one-case shards within a fixed allowance of merging one")
def _():
    if SANITIZED:
        return ASAN_SKIP
    spec = write_cases("merge-mid.json", MID)
    d = fresh_dir("merge-mid")
    shards = []
    for i in range(1, len(MID) + 1):
        s = os.path.join(d, "s%d.h5" % i)
        run("run", "--backend", "cpu", "--cases", spec, "--shard", "%d/%d" % (i, len(MID)),
            "-o", s, check=0)
        shards.append(s)
    out = os.path.join(d, "merged.h5")
    _, _, one = run("merge", "--partial", "-o", out, shards[0], check=0)
    _, _, six = run("merge", "-o", out, *shards, check=0)
    with h5py.File(out, "r") as f:
        assert sorted(f["cases"]) == [c["id"] for c in MID], list(f["cases"])
    assert sorted(os.listdir(d)) == sorted(["merged.h5"] + [os.path.basename(x) for x in shards])
    assert six - one <= GOLDEN_GROWTH, (
        "peak RSS %d bytes merging 6 shards, %d merging 1: merge holds more than one input"
        % (six, one))


@case("merge: shards merge to the unsharded file's case groups; a full disk leaves nothing")
def _():
    d = fresh_dir("merge")
    full = os.path.join(d, "full.h5")
    run("run", "--backend", "cpu", "--cases", TINY_SPEC, "-o", full, check=0)
    shards = []
    for i in (1, 2):
        s = os.path.join(d, "s%d.h5" % i)
        run("run", "--backend", "cpu", "--cases", TINY_SPEC, "--shard", "%d/2" % i, "-o", s,
            check=0)
        shards.append(s)
    out = os.path.join(d, "merged.h5")
    run("merge", "-o", out, *shards, check=0)
    with h5py.File(full, "r") as f, h5py.File(out, "r") as g:
        assert sorted(f["cases"]) == sorted(g["cases"])
    # same bytes as the unsharded run: shards' provenance equals it
    assert read(out) == read(full), "merged file differs from the unsharded run"
    os.unlink(out)
    rc, err, _ = run("merge", "-o", out, *shards, fsize=os.path.getsize(full) // 2)
    assert rc == 2, (rc, err)
    assert sorted(os.listdir(d)) == ["full.h5", "s1.h5", "s2.h5"], os.listdir(d)


def main():
    setup()
    failed = tap.run(RESULTS)
    if not failed:
        shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
