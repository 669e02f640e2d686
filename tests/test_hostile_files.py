#!/usr/bin/python3
"""What a hostile path can be, against the fattn CLI (docs/reliability.md,
"Files"): outputs that are not regular files, inputs that are not regular
files, files swapped while fattn reads them, outputs that are inputs, JSON
reports on a full disk, signals during a write, the reader child outliving
its parent or hanging, long paths, and golden's directory after a failure.

usage: test_hostile_files.py FATTN_EXE BAD_DIR SANITIZED TESTING   (prints TAP)

The attacks are file types and timing, so the hostile files are made here
at run time (FIFOs, symbolic links, a private device node, files renamed in
a loop) from a real `fattn run` output; the one committed file used is
BAD_DIR/hdf5-upstream-global-heap-segv.h5, a file that crashes libhdf5.
Tests that need a test-control hook (FATTN_TEST_ISOLATE_HANG,
FATTN_TEST_ISOLATE_WALL_S, FATTN_TEST_WRITE_PAUSE) report a skip unless
fattn was built with -Dtesting=true (TESTING=1). Needs h5py only to check
that a file is still a valid HDF5 file; without it the test skips, except
under CI=true.
"""
import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script)

h5py = tap.need_modules("h5py")

FATTN, BAD_DIR = sys.argv[1], sys.argv[2]
SANITIZED = sys.argv[3] == "1"
TESTING = sys.argv[4] == "1"
NO_HOOK = "SKIP built without -Dtesting: no test-control hook"
TMP = tempfile.mkdtemp(prefix="fattn-hostile-files-")
RESULTS = tap.Tests()
case = RESULTS.case
CRASHER = os.path.join(BAD_DIR, "hdf5-upstream-global-heap-segv.h5")

TINY = [
    {"id": "hf.thd.padding.bf16", "b": 2, "h": 1, "sq": 3, "skv": 3, "d_qk": 8,
     "layout": "thd_thd_thd", "mask": "padding", "pad_between_seqs": True,
     "seqlens_q": [2, 1], "seqlens_kv": [3, 1]},
]


def path(*names):
    return os.path.join(TMP, *names)


SPEC = path("tiny.json")
GOOD = path("good.h5")


def run(*args, env=None, check=None, timeout=60):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([FATTN] + list(args), capture_output=True, text=True, env=e,
                       timeout=timeout)
    if p.returncode < 0 or p.returncode >= 128:
        raise AssertionError("fattn %s died (exit %d)\n%s"
                             % (" ".join(args), p.returncode, p.stderr))
    if check is not None and p.returncode != check:
        raise AssertionError("fattn %s: exit %d, want %d\n%s" % (" ".join(args), p.returncode,
                                                                 check, p.stderr))
    return p


def refused(args, words, timeout=20):
    """fattn ARGS must exit 2 within `timeout` s with all of `words` in its
    message."""
    try:
        p = run(*args, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("fattn %s hung (over %d s)" % (" ".join(args), timeout))
    if p.returncode != 2:
        raise AssertionError("fattn %s: exit %d, want 2\n%s"
                             % (" ".join(args), p.returncode, p.stderr))
    for w in words:
        if w not in p.stderr:
            raise AssertionError("fattn %s: %r not in the message: %s"
                                 % (" ".join(args), w, p.stderr))
    return p


def read_bytes(p):
    with open(p, "rb") as f:
        return f.read()


def no_temporaries(d):
    left = [n for n in os.listdir(d) if ".tmp-" in n]
    if left:
        raise AssertionError("temporary files left in %s: %s" % (d, left))


def fresh_dir(name):
    d = path(name)
    shutil.rmtree(d, ignore_errors=True)
    os.mkdir(d)
    return d


def setup():
    with open(SPEC, "w") as f:
        json.dump(TINY, f)
    run("run", "--backend", "cpu", "--cases", SPEC, "-o", GOOD, check=0)


# ---- outputs that are not regular files ----------------------------------------

def output_commands(target):
    """Every command that writes a file, aimed at target."""
    return [
        ("run", ["run", "--backend", "cpu", "--cases", SPEC, "-o", target]),
        ("replay", ["replay", GOOD, "--from", "save_ctx", "--impl", "split", "-o", target]),
        ("merge", ["merge", "-o", target, GOOD]),
        ("diff --json", ["diff", GOOD, GOOD, "--json", target]),
        ("verify --json", ["verify", "--backend", "cpu", "--cases", SPEC, "--fixtures",
                           fixtures_with_golden(), "--json", target]),
    ]


def fixtures_with_golden():
    d = path("fx")
    if not os.path.isdir(d):
        os.mkdir(d)
        run("golden", "--backend", "cpu", "--cases", SPEC, "--force", "--allow-dirty", "-o", d,
            check=0)
    return d


@case("an output that is a FIFO, a directory or a device node is refused, left as it was")
def _():
    d = fresh_dir("nonregular")
    fifo = os.path.join(d, "out.fifo")
    os.mkfifo(fifo)
    sub = os.path.join(d, "out.dir")
    os.mkdir(sub)
    targets = [(fifo, stat.S_ISFIFO, "a FIFO"), (sub, stat.S_ISDIR, "a directory")]
    skipped = ""
    if os.geteuid() == 0:
        # A private copy of /dev/null's node: replacing it harms nothing.
        dev = os.path.join(d, "null")
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append((dev, stat.S_ISCHR, "a character device"))
    else:
        skipped = "SKIP (device node part only) not root: cannot make a device node"
    for target, is_kind, words in targets:
        for name, args in output_commands(target):
            refused(args, ["not a regular file", words, target])
            if not is_kind(os.lstat(target).st_mode):
                raise AssertionError("%s replaced %s" % (name, target))
        no_temporaries(d)
    return skipped or None


@case("an output that is a symbolic link is refused: neither the link nor its target changes")
def _():
    d = fresh_dir("symlink")
    victim = os.path.join(d, "victim.h5")
    shutil.copy(GOOD, victim)
    before = read_bytes(victim)
    link = os.path.join(d, "link.h5")
    os.symlink(victim, link)
    dangling = os.path.join(d, "dangling.h5")
    os.symlink(os.path.join(d, "nowhere.h5"), dangling)
    for target in (link, dangling):
        for name, args in output_commands(target):
            refused(args, ["symbolic link", target])
            if not os.path.islink(target):
                raise AssertionError("%s replaced the link %s" % (name, target))
    if read_bytes(victim) != before:
        raise AssertionError("the link's target changed")
    if os.path.exists(os.path.join(d, "nowhere.h5")):
        raise AssertionError("a file was created through the dangling link")
    no_temporaries(d)


# ---- inputs that are not regular files -----------------------------------------

@case("a FIFO as input is refused at once: inspect, diff, replay, merge, write-tree, a case file, a tolerance profile, verify's golden")
def _():
    d = fresh_dir("fifo-in")
    fifo = os.path.join(d, "in.h5")
    os.mkfifo(fifo)
    out = os.path.join(d, "out.h5")
    words = ["not a regular file", "a FIFO", fifo]
    refused(["inspect", fifo], words)
    refused(["diff", fifo, GOOD], words)
    refused(["diff", GOOD, fifo], words)
    refused(["replay", fifo, "--from", "save_ctx", "--impl", "split", "-o", out], words)
    refused(["merge", "-o", out, GOOD, fifo], words)
    refused(["write-tree", fifo, GOOD, "-o", out], words)
    refused(["run", "--backend", "cpu", "--cases", fifo, "-o", out], words)
    refused(["cases", "--cases", fifo], words)
    refused(["diff", GOOD, GOOD, "--mode", "tol", "--tol-profile", fifo], words)
    fx = fresh_dir("fifo-fx")
    golden = os.path.join(fx, "cpu-math-1.h5")
    os.mkfifo(golden)
    refused(["verify", "--backend", "cpu", "--cases", SPEC, "--fixtures", fx],
            ["not a regular file", golden])
    if os.path.exists(out):
        raise AssertionError("an output was written")
    no_temporaries(d)


@case("a directory or a device as input is refused")
def _():
    d = fresh_dir("dir-in")
    refused(["inspect", d], ["not a regular file", "a directory"])
    refused(["inspect", "/dev/zero"], ["not a regular file", "a character device"])


# ---- a file swapped between the isolated check and the read ---------------------

@case("files renamed over the input in a loop never crash fattn (inspect, diff, replay)")
def _():
    d = fresh_dir("swap")
    target = os.path.join(d, "in.h5")
    good = os.path.join(d, "good.h5")
    bad = os.path.join(d, "bad.h5")
    shutil.copy(GOOD, good)
    shutil.copy(CRASHER, bad)
    shutil.copy(GOOD, target)
    stop = threading.Event()

    def swapper():
        i = 0
        while not stop.is_set():
            tmp = os.path.join(d, "swap-%d" % i)
            os.link(good if i % 2 else bad, tmp)
            os.replace(tmp, target)
            i += 1

    t = threading.Thread(target=swapper)
    t.start()
    deaths = []
    runs = 0
    out = os.path.join(d, "out.h5")
    commands = [["inspect", target], ["diff", target, GOOD],
                ["replay", target, "--from", "save_ctx", "--impl", "split", "-o", out]]
    try:
        deadline = time.time() + (8 if SANITIZED else 4)
        while time.time() < deadline or runs < 3 * len(commands):
            for args in commands:
                p = subprocess.run([FATTN] + args, capture_output=True, text=True, timeout=60)
                runs += 1
                if p.returncode < 0 or p.returncode >= 128:
                    deaths.append("%s: exit %d" % (args[0], p.returncode))
            if runs >= 600:
                break
    finally:
        stop.set()
        t.join()
    if deaths:
        raise AssertionError("%d of %d runs died: %s" % (len(deaths), runs, deaths[:5]))


def rewritten_in_place(name, size=None):
    """Run inspect, diff, replay and report on a file rewritten in place (the
    same inode) in a loop between CRASHER and GOOD, each padded with zeros
    to `size` bytes when given (libhdf5 ignores bytes past the file's end of
    allocation; the padding is a hole, so a large file costs no disk)."""
    d = fresh_dir(name)
    target = os.path.join(d, "in.h5")
    good, bad = read_bytes(GOOD), read_bytes(CRASHER)
    n = max(len(good), len(bad))
    good, bad = good.ljust(n, b"\0"), bad.ljust(n, b"\0")
    with open(target, "wb") as f:
        f.write(good)
        if size:
            f.truncate(size)
    stop = threading.Event()

    def rewriter():
        # the same inode throughout: what the child checked, then the parent
        # read, is what changes unless the reader works on a snapshot
        fd = os.open(target, os.O_WRONLY)
        try:
            i = 0
            while not stop.is_set():
                data = bad if i % 2 else good
                os.pwrite(fd, data, 0)
                if not size:
                    os.ftruncate(fd, len(data))
                i += 1
        finally:
            os.close(fd)

    t = threading.Thread(target=rewriter)
    t.start()
    deaths, runs = [], 0
    out = os.path.join(d, "out.h5")
    commands = [["inspect", target], ["diff", target, GOOD],
                ["replay", target, "--from", "save_ctx", "--impl", "split", "-o", out],
                ["report", target, GOOD, "-o", os.path.join(d, "r.html")]]
    snaps = os.path.join(d, "tmpdir")  # where the readers' snapshots go
    os.mkdir(snaps)
    env = dict(os.environ, TMPDIR=snaps)
    # a copy taken mid-rewrite is a torn file, on which libhdf5 may spin: the
    # child is then stopped by its wall-clock limit (short here, -Dtesting)
    if TESTING:
        env["FATTN_TEST_ISOLATE_WALL_S"] = "5"
    try:
        deadline = time.time() + (8 if SANITIZED else 4)
        while time.time() < deadline or runs < 3 * len(commands):
            for args in commands:
                p = subprocess.run([FATTN] + args, capture_output=True, text=True,
                                   timeout=60 if TESTING else 200, env=env)
                runs += 1
                if p.returncode < 0 or p.returncode >= 128:
                    deaths.append("%s: exit %d" % (args[0], p.returncode))
            if runs >= 600:
                break
    finally:
        stop.set()
        t.join()
    if deaths:
        raise AssertionError("%d of %d runs died: %s" % (len(deaths), runs, deaths[:5]))
    assert not os.listdir(snaps), "snapshots left: %s" % os.listdir(snaps)


@case("a file rewritten in place in a loop never crashes fattn (inspect, diff, replay, report)")
def _():
    rewritten_in_place("inplace")


@case("a file over 64 MiB rewritten in place in a loop never crashes fattn (it is copied too)")
def _():
    rewritten_in_place("inplace-large", size=65 << 20)


@case("no room for the private copy of an input: refused naming the file and TMPDIR, nothing left")
def _():
    d = fresh_dir("no-room")
    big = os.path.join(d, "big.h5")
    shutil.copy(GOOD, big)
    with open(big, "r+b") as f:
        f.truncate(65 << 20)
    snaps = fresh_dir("no-room-tmpdir")
    import resource

    def small_disk():  # a file system with 1 MiB free, as far as fattn can tell
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    out = os.path.join(d, "out.h5")
    for args in (["inspect", big], ["diff", big, GOOD],
                 ["replay", big, "--from", "save_ctx", "--impl", "split", "-o", out]):
        p = subprocess.run([FATTN] + args, capture_output=True, text=True, timeout=120,
                           preexec_fn=small_disk, env=dict(os.environ, TMPDIR=snaps))
        if p.returncode != 2 or "private copy" not in p.stderr or big not in p.stderr \
                or snaps not in p.stderr:
            raise AssertionError("%s: exit %d: %s" % (args[0], p.returncode, p.stderr))
        assert not os.listdir(snaps), "%s left %s" % (args[0], os.listdir(snaps))
        assert not os.path.exists(out)
    # a TMPDIR that is not there
    p = run("inspect", big, env={"TMPDIR": os.path.join(d, "missing")})
    if p.returncode != 2 or "private copy" not in p.stderr:
        raise AssertionError("missing TMPDIR: exit %d: %s" % (p.returncode, p.stderr))


@case("a sparse 3 GB file of a few KB of data: its one private copy holds at most the file's "
      "allocated bytes (measured)")
def _():
    if not TESTING:
        return NO_HOOK
    d = fresh_dir("sparse")
    snaps = fresh_dir("sparse-tmpdir")
    big = os.path.join(d, "sparse.h5")
    shutil.copy(GOOD, big)
    with open(big, "r+b") as f:
        f.truncate(3 << 30)  # a hole to the end: HDF5 reads what its superblock says
    src = os.stat(big)
    target = os.path.join(d, "out.h5")
    env = dict(os.environ, FATTN_TEST_WRITE_PAUSE="1", TMPDIR=snaps)
    p = subprocess.Popen([FATTN, "replay", big, "--from", "save_ctx", "--impl", "split", "-o",
                          target], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    copies, deadline = [], time.time() + 60
    while not (glob.glob(os.path.join(d, ".out.h5.tmp-*")) and copies):
        if time.time() > deadline or p.poll() is not None:
            p.kill()
            raise AssertionError("no copy and temporary seen (exit %s)" % p.poll())
        copies = [os.stat(os.path.join(snaps, n)) for n in os.listdir(snaps)]
        time.sleep(0.01)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert len(copies) == 1, "%d copies at once" % len(copies)
    c = copies[0]
    print("# measured: input %d bytes long, %d allocated; its copy %d bytes long, %d allocated"
          % (src.st_size, src.st_blocks * 512, c.st_size, c.st_blocks * 512))
    assert c.st_size == src.st_size, (c.st_size, src.st_size)
    assert c.st_blocks <= src.st_blocks, (c.st_blocks, src.st_blocks)
    assert not os.listdir(snaps), os.listdir(snaps)


def memory_backed_dir():
    """A directory on tmpfs where this machine has one (/dev/shm), else None."""
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    for m in mounts:
        if len(m) > 2 and m[1] == "/dev/shm" and m[2] == "tmpfs" and os.access(m[1], os.W_OK):
            return tempfile.mkdtemp(prefix="fattn-hostile-shm-", dir=m[1])
    return None


@case("a TMPDIR in memory (tmpfs): the private copy counts in --max-memory")
def _():
    shm = memory_backed_dir()
    if not shm:
        return "SKIP no tmpfs at /dev/shm"
    try:
        mid = path("mid.h5")  # about 3.5 MB, most of it datasets
        if not os.path.exists(mid):
            spec = path("mid.json")
            with open(spec, "w") as f:
                json.dump([{"id": "hf.mid", "b": 8, "h": 4, "sq": 32, "d_qk": 128}], f)
            run("run", "--backend", "cpu", "--cases", spec, "-o", mid, check=0)
        size = os.path.getsize(mid)
        bound = str(int(1.6 * size))  # the file fits, the file and its copy do not
        run("inspect", "--max-memory", bound, mid, check=0)  # TMPDIR on disk
        p = run("inspect", "--max-memory", bound, mid, env={"TMPDIR": shm}, check=2)
        assert "private copies in a memory-backed TMPDIR" in p.stderr, p.stderr
        p = run("inspect", "--max-memory", str(size // 2), mid, env={"TMPDIR": shm}, check=2)
        assert "its private copy would hold" in p.stderr and shm in p.stderr, p.stderr
        assert not os.listdir(shm), os.listdir(shm)
    finally:
        shutil.rmtree(shm, ignore_errors=True)


# ---- outputs that are inputs ------------------------------------------------------

@case("an output that is one of the command's inputs is refused before any work, input intact")
def _():
    d = fresh_dir("out-is-in")
    a = os.path.join(d, "a.h5")
    shutil.copy(GOOD, a)
    hard = os.path.join(d, "hard.h5")
    os.link(a, hard)
    fx = fresh_dir("out-is-in-fx")
    shutil.copy(os.path.join(fixtures_with_golden(), "cpu-math-1.h5"), fx)
    golden = os.path.join(fx, "cpu-math-1.h5")
    keep = {p: read_bytes(p) for p in (a, golden, SPEC)}
    for out in (a, hard):
        refused(["diff", a, GOOD, "--json", out], ["is an input"])
        refused(["merge", "-o", out, a], ["is an input"])
        refused(["replay", a, "--from", "save_ctx", "--impl", "split", "-o", out],
                ["is an input"])
    refused(["verify", "--backend", "cpu", "--cases", SPEC, "--fixtures", fx, "--json", golden],
            ["is an input", golden])
    refused(["verify", "--backend", "cpu", "--cases", SPEC, "--fixtures", fx, "--json", SPEC],
            ["is an input"])
    spec = os.path.join(d, "spec.json")
    shutil.copy(SPEC, spec)
    keep[spec] = read_bytes(spec)
    refused(["run", "--backend", "cpu", "--cases", spec, "-o", spec], ["is an input"])
    for p, b in keep.items():
        if read_bytes(p) != b:
            raise AssertionError("%s was changed" % p)
    no_temporaries(d)
    no_temporaries(fx)


@case("JSON reports on a full disk: the old report stays whole, no temporary left")
def _():
    d = fresh_dir("json-full")
    old = '{"old": "report"}'
    import resource

    def full_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))

    # verify without goldens reads no run file, so the report's own write is
    # what fails; diff's inputs are copied privately first (fileguard.h), so
    # there the copy is refused first: the old report must stay all the same
    no_goldens = fresh_dir("json-full-fx")
    reports = [("diff", ["diff", GOOD, GOOD, "--json"], "private copy"),
               ("verify", ["verify", "--backend", "cpu", "--cases", SPEC, "--fixtures",
                           no_goldens, "--json"], "cannot write the JSON report")]
    for name, args, words in reports:
        rep = os.path.join(d, name + ".json")
        with open(rep, "w") as f:
            f.write(old)
        p = subprocess.run([FATTN] + args + [rep], capture_output=True, text=True,
                           preexec_fn=full_disk, timeout=120)
        if p.returncode != 2:
            raise AssertionError("%s: exit %d, want 2\n%s" % (name, p.returncode, p.stderr))
        if words not in p.stderr:
            raise AssertionError("%s: message: %s" % (name, p.stderr))
        with open(rep) as f:
            if f.read() != old:
                raise AssertionError("%s destroyed the old report" % name)
        # and without the limit the report is complete, valid JSON
        run(*(args + [rep]))
        with open(rep) as f:
            json.load(f)
    no_temporaries(d)


# ---- signals during a write ---------------------------------------------------------

# Every signal whose default action ends the process (signal(7): Term and
# Core), SIGKILL aside: fattn's handler removes its temporary files, scratch
# files and the private copies of its inputs, then dies of the signal.
# Under the sanitizers SIGSEGV, SIGBUS and SIGFPE are the sanitizer's own
# (fattn leaves a handler of the program's own alone).
FATAL_SIGNALS = [getattr(signal, n) for n in (
    "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE",
    "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGXCPU",
    "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR", "SIGSYS") if hasattr(signal, n)]
FATAL_SIGNALS += [signal.SIGRTMIN, signal.SIGRTMAX]
SANITIZER_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE}


def default_signals():
    """In the child: every signal at its default (a test runner or nohup may
    ignore some, and fattn keeps an ignored signal ignored), no core files."""
    import resource
    for sig in FATAL_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@case("every signal whose default action ends the process (INT, TERM, HUP, QUIT, ALRM, USR1, "
      "USR2, XCPU, XFSZ, VTALRM, PROF, the faults, the real-time ones) during a write removes "
      "the temporary file and the input's private copy, target intact")
def _():
    if not TESTING:
        return NO_HOOK
    d = fresh_dir("signals")
    snaps = fresh_dir("signals-tmpdir")  # the input's private copy goes here
    target = os.path.join(d, "out.h5")
    shutil.copy(GOOD, target)
    before = read_bytes(target)
    sent = []
    for sig in FATAL_SIGNALS:
        if SANITIZED and sig in SANITIZER_SIGNALS:
            continue
        env = dict(os.environ, FATTN_TEST_WRITE_PAUSE="20", TMPDIR=snaps)
        p = subprocess.Popen([FATTN, "replay", GOOD, "--from", "save_ctx", "--impl", "split",
                              "-o", target], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True,
                             preexec_fn=default_signals)
        deadline = time.time() + 60
        # the output's temporary file (held by the pause) beside the one
        # private copy of GOOD
        while not (glob.glob(os.path.join(d, ".out.h5.tmp-*")) and os.listdir(snaps)):
            if time.time() > deadline or p.poll() is not None:
                p.kill()
                raise AssertionError("no temporary file appeared (exit %s)" % p.poll())
            time.sleep(0.01)
        assert len(os.listdir(snaps)) == 1, os.listdir(snaps)
        p.send_signal(sig)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            raise AssertionError("signal %d did not end fattn" % sig)
        if p.returncode != -sig:
            raise AssertionError("signal %d: exit %d" % (sig, p.returncode))
        no_temporaries(d)
        assert not os.listdir(snaps), "signal %d left %s" % (sig, os.listdir(snaps))
        if read_bytes(target) != before:
            raise AssertionError("signal %d: the target changed" % sig)
        sent.append(sig)
    with h5py.File(target, "r") as f:
        f["cases"]
    print("# sent: %s" % " ".join(signal.Signals(s).name if s in signal.Signals._value2member_map_
                                   else str(s) for s in sent))


@case("SIGXFSZ at its default: a write past the file-size limit dies of it and leaves nothing; "
      "a private copy past it is refused before it is written")
def _():
    import resource
    d = fresh_dir("xfsz")
    snaps = fresh_dir("xfsz-tmpdir")

    def limited(n):
        def apply():
            default_signals()  # SIGXFSZ at its default: the kernel's signal kills
            resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
        return apply
    target = os.path.join(d, "out.h5")
    p = subprocess.run([FATTN, "run", "--backend", "cpu", "--cases", SPEC, "-o", target],
                       capture_output=True, text=True, timeout=60, preexec_fn=limited(4096))
    assert p.returncode == -signal.SIGXFSZ, "exit %d: %s" % (p.returncode, p.stderr)
    assert listing_of(d) == [], listing_of(d)
    # a sparse input of 65 MiB (its data a few KB) under a 1 MiB limit: its
    # copy would end past the limit, so it is refused, not killed
    big = os.path.join(snaps, "..", "xfsz-big.h5")
    shutil.copy(GOOD, big)
    with open(big, "r+b") as f:
        f.truncate(65 << 20)
    p = subprocess.run([FATTN, "inspect", big], capture_output=True, text=True, timeout=60,
                       preexec_fn=limited(1 << 20), env=dict(os.environ, TMPDIR=snaps))
    assert p.returncode == 2 and "file-size limit" in p.stderr and "private copy" in p.stderr, \
        "exit %d: %s" % (p.returncode, p.stderr)
    assert not os.listdir(snaps), os.listdir(snaps)


def listing_of(d):
    return sorted(os.listdir(d))


def signal_while_writing(args, d, pattern, sig, env_extra=None, pause="3"):
    """Start fattn args (FATTN_TEST_WRITE_PAUSE holding each write `pause` s
    before its rename), wait for a file matching pattern in d, send sig; its
    exit."""
    env = dict(os.environ, FATTN_TEST_WRITE_PAUSE=pause, **(env_extra or {}))
    p = subprocess.Popen([FATTN, *args], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         preexec_fn=default_signals)
    deadline = time.time() + 60
    while not glob.glob(os.path.join(d, pattern)):
        if time.time() > deadline or p.poll() is not None:
            p.kill()
            raise AssertionError("%s never appeared (exit %s)" % (pattern, p.poll()))
        time.sleep(0.02)
    p.send_signal(sig)
    try:
        return p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("signal %d did not end fattn" % sig)


@case("SIGINT while run --repeat or merge writes its output removes their scratch files too")
def _():
    if not TESTING:
        return NO_HOOK
    d = fresh_dir("scratch-signals")
    target = os.path.join(d, "out.h5")
    rc = signal_while_writing(["run", "--backend", "cpu", "--cases", SPEC, "--repeat", "2",
                               "-o", target], d, ".out.h5.tmp-*", signal.SIGINT)
    left = [n for n in os.listdir(d) if n.startswith(".")]
    assert rc == -signal.SIGINT and not left, "run --repeat: exit %s, left %s" % (rc, left)
    one = os.path.join(d, "one.h5")
    shutil.copy(GOOD, one)
    rc = signal_while_writing(["merge", "-o", target, one], d, ".out.h5.tmp-*", signal.SIGINT)
    left = [n for n in os.listdir(d) if n.startswith(".")]
    assert rc == -signal.SIGINT and not left, "merge: exit %s, left %s" % (rc, left)


@case("SIGINT while merge writes from 9 inputs removes every scratch, snapshot and temporary (more than 16 cleanup slots)")
def _():
    if not TESTING:
        return NO_HOOK
    d = fresh_dir("many-slots")
    snaps = fresh_dir("many-slots-tmpdir")  # the inputs' snapshots go here
    inputs = []
    for i in range(9):
        spec = os.path.join(d, "s%d.json" % i)
        with open(spec, "w") as f:
            json.dump([dict(TINY[0], id="hf.many.%02d" % i)], f)
        out = os.path.join(d, "in%02d.h5" % i)
        run("run", "--backend", "cpu", "--cases", spec, "-o", out, check=0)
        inputs.append(out)
    target = os.path.join(d, "out.h5")
    # 9 snapshots + 9 merge scratch files + the output's temporary: 19
    # registrations, where there were 16 slots (each write pauses 1 s)
    rc = signal_while_writing(["merge", "-o", target] + inputs, d, ".out.h5.tmp-*",
                              signal.SIGINT, env_extra={"TMPDIR": snaps}, pause="1")
    left = [n for n in os.listdir(d) if n.startswith(".")]
    assert rc == -signal.SIGINT and not left, "merge: exit %s, left %s" % (rc, left)
    assert not os.listdir(snaps), "snapshots left: %s" % os.listdir(snaps)
    assert not os.path.exists(target)


@case("SIGTERM or SIGINT during verify's plan prebuild removes its temporary plan store and its children")
def _():
    if not TESTING:
        return NO_HOOK
    for sig in (signal.SIGTERM, signal.SIGINT):
        tmpdir = fresh_dir("prebuild-tmpdir")
        env = dict(os.environ, TMPDIR=tmpdir, FATTN_TEST_PREBUILD="30")
        env.pop("FATTN_CUDNN_PLAN_DIR", None)
        p = subprocess.Popen([FATTN, "verify", "--backend", "cpu", "--jobs", "2", "--cases", SPEC,
                              "--fixtures", fixtures_with_golden()], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True, preexec_fn=default_signals)
        try:
            deadline = time.time() + 60
            kids = []
            while not (glob.glob(os.path.join(tmpdir, "fattn-plans-*")) and len(kids) >= 2):
                kids = tap.children_of(p.pid)
                if time.time() > deadline or p.poll() is not None:
                    raise AssertionError("no plan store or children seen (exit %s): %s"
                                         % (p.poll(), p.stderr.read() if p.poll() is not None
                                            else ""))
                time.sleep(0.02)
            # a plan file of a child in the store, as a real prebuild leaves
            store = glob.glob(os.path.join(tmpdir, "fattn-plans-*"))[0]
            with open(os.path.join(store, "0123456789abcdef.plan"), "wb") as f:
                f.write(b"FATTNPLN")
            p.send_signal(sig)
            p.wait(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode == -sig, "signal %d: exit %s" % (sig, p.returncode)
        assert not os.listdir(tmpdir), "signal %d: left in TMPDIR: %s" % (sig, os.listdir(tmpdir))
        assert_gone(kids, "signal %d: the plan-building children outlived verify" % sig)


@case("SIGPIPE (--progress into a closed pipe) removes the temporary file")
def _():
    d = fresh_dir("sigpipe")
    target = os.path.join(d, "out.h5")
    p = subprocess.Popen([FATTN, "run", "--backend", "cpu", "--cases", SPEC, "--progress",
                          "-o", target], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         restore_signals=True)
    p.stderr.close()  # the reader gone before the first progress line
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGPIPE, "exit %s (want SIGPIPE)" % p.returncode
    no_temporaries(d)
    assert not os.path.exists(target)


@case("an output name of 254 bytes is written (the temporary name is cut to fit)")
def _():
    d = fresh_dir("longname")
    target = os.path.join(d, "x" * 251 + ".h5")
    run("run", "--backend", "cpu", "--cases", SPEC, "-o", target, check=0)
    with h5py.File(target, "r") as f:
        f["cases"]
    no_temporaries(d)


# ---- the reader child -----------------------------------------------------------------

def assert_gone(pids, what):
    """Wait up to 10 s for pids to exit; else kill them and fail with `what`."""
    deadline = time.time() + 10
    while any(tap.alive(k) for k in pids):
        if time.time() > deadline:
            for k in pids:
                try:
                    os.kill(k, signal.SIGKILL)
                except OSError:
                    pass
            raise AssertionError(what)
        time.sleep(0.05)


@case("the reader child dies with its parent")
def _():
    if not TESTING:
        return NO_HOOK
    env = dict(os.environ, FATTN_TEST_ISOLATE_HANG="1")
    p = subprocess.Popen([FATTN, "inspect", GOOD], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        kids = []
        while not kids:
            kids = tap.children_of(p.pid)
            if time.time() > deadline or p.poll() is not None:
                raise AssertionError("no reader child seen (exit %s)" % p.poll())
            time.sleep(0.02)
        time.sleep(0.2)  # past the child's set-up
        p.kill()
        p.wait()
        assert_gone(kids, "the reader child outlived its parent")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@case("a reader child that never finishes is stopped by the wall-clock limit")
def _():
    if not TESTING:
        return NO_HOOK
    t0 = time.time()
    p = run("inspect", GOOD, env={"FATTN_TEST_ISOLATE_HANG": "1",
                                  "FATTN_TEST_ISOLATE_WALL_S": "1"}, timeout=60)
    if p.returncode != 2 or "wall-clock limit" not in p.stderr or GOOD not in p.stderr:
        raise AssertionError("exit %d: %s" % (p.returncode, p.stderr))
    if time.time() - t0 > 30:
        raise AssertionError("took %.1f s" % (time.time() - t0))


# ---- long paths, golden's directory ---------------------------------------------------

@case("a long path keeps the cause at the end of the message")
def _():
    d = TMP
    while len(d) < 3300:
        d = os.path.join(d, "d" * 200)
    os.makedirs(d)
    bad = os.path.join(d, "not-hdf5.h5")
    with open(bad, "w") as f:
        f.write("this is not an HDF5 file\n")
    missing = os.path.join(d, "missing.h5")
    for target, cause in ((bad, "signature"), (missing, "No such file or directory")):
        p = refused(["inspect", target], [])
        last = p.stderr.strip().splitlines()[-1]
        if cause not in last[-200:]:
            raise AssertionError("the cause %r is not at the end: ...%s" % (cause, last[-300:]))
        if os.path.basename(target) not in last:
            raise AssertionError("the file's name is lost: ...%s" % last[-300:])


@case("a failed golden removes the directory it created")
def _():
    out = path("golden-new")
    bad_spec = os.path.join(BAD_DIR, "spec-bad-id.json")
    refused(["golden", "--backend", "cpu", "--cases", bad_spec, "-o", out], [])
    if os.path.exists(out):
        raise AssertionError("%s was left behind" % out)
    # a directory that existed before stays
    os.mkdir(out)
    refused(["golden", "--backend", "cpu", "--cases", bad_spec, "-o", out], [])
    if not os.path.isdir(out):
        raise AssertionError("%s, which existed before, was removed" % out)



@case("golden over an old goldens file it cannot read says so, not 'no previous goldens'")
def _():
    d = fresh_dir("golden-unreadable")
    old = os.path.join(d, "cpu-math-1.h5")
    with open(old, "wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n" + b"\0" * 200)  # a signature and nothing of a file
    p = run("golden", "--backend", "cpu", "--cases", SPEC, "--force", "--allow-dirty", "-o", d,
            check=0)
    assert "no previous goldens" not in p.stdout and "cannot be read" in p.stdout and \
        old in p.stdout, p.stdout
    with h5py.File(old, "r") as f:  # replaced all the same
        f["cases"]

def main():
    try:
        setup()
        failed = tap.run(RESULTS)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(1 if failed else 0)


main()
