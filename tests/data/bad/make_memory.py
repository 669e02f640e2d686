#!/usr/bin/python3
"""Make the memory-*.h5 files of tests/data/bad/memory (docs/reliability.md,
Memory).

usage: make_memory.py FATTN_EXE [OUT_DIR]   (OUT_DIR: memory/ beside this file)

They live in a directory of their own, outside the tests/data/bad/*.h5 that
tests/test_reliability.py requires inspect, diff, replay, merge and verify
all to refuse: these files are valid run files (inspect accepts them, their
tensors and digests are sound) that ask a replay for more memory than it
may take, and only replay must refuse them.

Each file starts as a real `fattn run` of one small case (fixed
SOURCE_DATE_EPOCH) and has exactly one thing changed with h5py, so that only
the targeted check can fire:

  memory-thd-max-seqlen.h5   a THD training case whose save_ctx records
      max_seqlen_q = max_seqlen_kv = 2^26 (the spec's lengths are 2 and 1).
      The value is in the range the attribute reader accepts (> 0); a
      backward resumed there sizes its buffers by it, so `fattn replay --from
      save_ctx` must refuse it before allocating: under --max-memory its
      estimated peak (about 9e11 bytes) is too large. Attributes carry no
      digest, so nothing is recomputed.

Needs Debian's python3-h5py. The committed files were made by this script;
run it again after a schema change and commit what it writes.
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

CASE = {"id": "memory.thd.max_seqlen", "b": 2, "h": 1, "sq": 3, "skv": 3, "d_qk": 8,
        "layout": "thd_thd_thd", "mask": "padding", "pad_between_seqs": True,
        "seqlens_q": [2, 1], "seqlens_kv": [3, 1]}
HUGE_SEQLEN = 1 << 26


def fattn_run(fattn, case, dst):
    with tempfile.TemporaryDirectory() as d:
        spec = os.path.join(d, "case.json")
        with open(spec, "w") as f:
            json.dump([case], f)
        env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
        subprocess.run([fattn, "run", "--backend", "cpu", "--cases", spec, "-o", dst],
                       check=True, env=env)


def main():
    fattn = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "memory")
    dst = os.path.join(out, "memory-thd-max-seqlen.h5")
    fattn_run(fattn, CASE, dst)
    with h5py.File(dst, "r+") as f:
        sc = f["cases/%s/save_ctx" % CASE["id"]]
        for name in ("max_seqlen_q", "max_seqlen_kv"):
            sc.attrs.modify(name, np.int64(HUGE_SEQLEN))
    print(dst)


if __name__ == "__main__":
    main()
