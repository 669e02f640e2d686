"""fattn-te verify's verdict on cuDNN: d_softmax_offset (non-deterministic
there, docs/determinism.md) counts only beyond the io dtype's tolerance, as
in `fattn verify`; elsewhere, and on the CPU, every bit counts. Run by
test_te.sh with a run file A that has the sink case CASE; prints one line per
check, exit 1 if any fails. Usage: check_verdict.py FATTN A CASE WORKDIR"""
import io
import os
import sys
from contextlib import redirect_stdout

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fattn_te import verify  # noqa: E402
from fattn_te.cli import rf  # noqa: E402


def perturbed(fattn, src, case, factor, out):
    tree = rf.load_tree(src)
    node = tree["children"]["cases"]["children"][case]["children"]["backward"]
    ds = node["children"]["d_softmax_offset"]
    x = ds["data"].astype(np.float32)
    ds["data"] = (x * np.float32(factor)).astype(x.dtype)
    rf.write_tree(out, tree, fattn=fattn)


def verdict(fattn, a, b, io_dtypes):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = verify._verdict(fattn, "A", a, "B", b, io_dtypes)["exit"]
    return rc, buf.getvalue()


def main():
    fattn, a, case, work = sys.argv[1:5]
    fail = 0
    near, far = os.path.join(work, "near.h5"), os.path.join(work, "far.h5")
    perturbed(fattn, a, case, 1 + 2e-4, near)   # within f16's 1e-3
    perturbed(fattn, a, case, 1.5, far)          # far beyond it
    cases = {case: "float16"}
    for name, b, io_dtypes, want_rc, want in [
        ("cuDNN rule: a small d_softmax_offset change is within tolerance", near, cases, 0,
         "1 d_softmax_offset within tolerance"),
        ("cuDNN rule: a large one still counts", far, cases, 1, "/backward/d_softmax_offset"),
        ("CPU: every bit counts", near, None, 1, "/backward/d_softmax_offset"),
    ]:
        rc, out = verdict(fattn, a, b, io_dtypes)
        ok = rc == want_rc and want in out
        print(f"{'ok' if ok else 'not ok'} - {name}" + ("" if ok else f": rc {rc}, {out!r}"))
        fail |= not ok
    return fail


if __name__ == "__main__":
    sys.exit(main())
