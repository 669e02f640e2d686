"""fattn-te's own files and processes, guarded as fattn's are (docs/te.md,
"Trust and files"; fattn's side: harness/files/fileguard.h).

  unpack_wheel(path, work)  a --te wheel unpacked into a folder of `work` named
                            by its content's digest: two wheels of one file
                            name from different folders never share a folder
  check_target(path)        an output path fattn-te may write: absent, or a
                            regular file; a symbolic link (dangling or not), a
                            FIFO, a directory or a device is refused
  write_text(path, text)    replaced atomically (a temporary file beside it,
                            fsync, rename, fsync of the directory), never
                            through a link
  stopping()                a context in which SIGTERM, SIGINT, SIGHUP and
                            SIGQUIT raise Stopped, so that `finally` blocks
                            remove the temporary folders, and run() hands the
                            signal on to its child and waits for it
  run(argv, ...)            subprocess.run, the child stopped with the parent

Each refusal is rf.InputError naming the path and the cause (exit 2).
"""
import contextlib
import hashlib
import os
import signal
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))),
                                "tools", "python"))
import fattn_runfile as rf  # noqa: E402

# The signals whose default action ends fattn-te that a user or a job
# runner sends to stop it.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


class Stopped(BaseException):
    """A stop signal arrived; raised where the program is, so that its
    `finally` blocks run (BaseException: no `except Exception` keeps it)."""

    def __init__(self, signum):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


def _digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack_wheel(path, work):
    """A TE wheel file unpacked into work/wheel-<sha256 of its bytes> (a wheel
    is a zip archive; nothing of it is installed). Keyed by content, not by
    name: two wheels named alike are two folders, and one wheel given twice
    is unpacked once."""
    import zipfile
    try:
        key = _digest(path)
    except OSError as e:
        raise rf.InputError(f"--te {path}: not a readable wheel ({e})")
    dest = os.path.join(work, "wheel-" + key[:32])
    if not os.path.isdir(dest):
        part = dest + ".part"
        try:
            with zipfile.ZipFile(path) as z:
                z.extractall(part)
            os.rename(part, dest)
        except (OSError, zipfile.BadZipFile) as e:
            raise rf.InputError(f"--te {path}: not a readable wheel ({e})")
    return dest


def _kind(mode):
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def check_target(path):
    """InputError unless `path` may be replaced: absent or a regular file (a
    link in its directories is followed, the last component is not)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise rf.InputError(f"{path}: cannot check the output: {e.strerror}")
    if stat.S_ISLNK(st.st_mode):
        raise rf.InputError(f"{path}: the output is a symbolic link: refused (name the file "
                            "itself)")
    if not stat.S_ISREG(st.st_mode):
        raise rf.InputError(f"{path}: the output exists and is not a regular file "
                            f"({_kind(st.st_mode)}): refused")


def write_text(path, text):
    """Replace `path` with `text` (UTF-8) atomically, refusing a link or any
    other non-regular target, as fattn's outputs are written: nothing is
    written through a link planted where the file goes, and a failure leaves
    the old file and no temporary one."""
    check_target(path)
    d = rf.target_dir(path)
    tmp = os.path.join(d, ".%s.tmp-%d" % (os.path.basename(path)[:200], os.getpid()))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o666)
    except OSError as e:
        raise rf.InputError(f"{path}: cannot create {tmp}: {e.strerror}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        check_target(path)  # again: it may have become something else meanwhile
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _on_signal(signum, _frame):
    raise Stopped(signum)


@contextlib.contextmanager
def stopping():
    """Within: the stop signals raise Stopped (a signal that was ignored, as
    under nohup, stays ignored); after: the previous handlers."""
    old = {}
    for s in STOP_SIGNALS:
        prev = signal.getsignal(s)
        if prev is signal.SIG_IGN:
            continue
        old[s] = prev
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, prev in old.items():
            signal.signal(s, prev)


def die_of(signum):
    """End the process by `signum` at its default action (after the cleanup
    ran), so that its parent sees what stopped it."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached unless the signal is blocked


def run(argv, **kwargs):
    """subprocess.run(argv, **kwargs), and when the parent is stopped meanwhile
    the child is sent the same signal (its own cleanup runs: a fattn-te or
    fattn child removes its temporary files), waited for 10 s, killed if it
    is still there, and Stopped raised on."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    stdin = kwargs.pop("input", None)
    capture = kwargs.pop("capture_output")
    if capture:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
    p = subprocess.Popen(argv, **kwargs)
    try:
        out, err = p.communicate(stdin)
    except Stopped as e:
        with contextlib.suppress(OSError):
            p.send_signal(e.signum)
        try:
            p.wait(timeout=10)
        except (subprocess.TimeoutExpired, Stopped):
            p.kill()
            p.wait()
        raise
    except BaseException:
        p.kill()
        p.wait()
        raise
    return subprocess.CompletedProcess(argv, p.returncode, out, err)
