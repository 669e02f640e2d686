#!/usr/bin/python3
"""Generator of the validate-*.h5 run files beside this script.

usage: make_validate.py FATTN_EXE XXH128_EXE [OUT_DIR]   (OUT_DIR: this directory)

Each file is a real `fattn run` of the two tiny cases below (split front end,
CPU engine, SOURCE_DATE_EPOCH=0), then one edit with h5py: every dataset it
touches gets its `dtype` and a recomputed `digest`, so the only thing wrong
with a file is what its name says, and only the full validation (inspect,
replay, merge, verify's golden) can catch it. The case attribute digest
(`attrs_digest`, docs/run-files.md) is removed from every file but the one
that tests it, as a file from before it existed: absent, it is not checked,
so it cannot be what refuses the others. Reading for diff stays safe:
these files are well-formed HDF5 with digests that match, which is why they
live in their own directory (tests/data/bad/*.h5 must also fail diff's
read). tests/test_hostile_validate.py reads them; each entry of FILES is
(name, edit, what the refusal must mention).

Regenerate with
  tests/data/bad/validate/make_validate.py build/harness/fattn build/tests/xxh128
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

CASES = [
    {"id": "v.bshd.causal.f32", "b": 1, "h": 1, "sq": 2, "skv": 3, "d_qk": 8,
     "dtype": "float32", "mask": "causal", "seed": 3},
    {"id": "v.thd.padding.bf16", "b": 2, "h": 1, "sq": 3, "skv": 3, "d_qk": 8,
     "layout": "thd_thd_thd", "mask": "padding", "pad_between_seqs": True,
     "seqlens_q": [2, 1], "seqlens_kv": [3, 1]},
]
F32 = "cases/v.bshd.causal.f32"
THD = "cases/v.thd.padding.bf16"
XXH = None


def digest(arr):
    p = subprocess.run([XXH], input=np.ascontiguousarray(arr).tobytes(), capture_output=True,
                       check=True)
    return p.stdout.decode().strip()


def put(f, p, arr, dtype_name):
    if p in f:
        del f[p]
    ds = f.create_dataset(p, data=arr)
    ds.attrs["dtype"] = dtype_name
    ds.attrs["digest"] = digest(arr)


def set_attr(p, name, value):
    def fn(f):
        f[p].attrs[name] = value
    return fn


def spec_edit(p, **kv):
    def fn(f):
        s = json.loads(f[p].attrs["spec"])
        s.update(kv)
        f[p].attrs["spec"] = json.dumps(s, sort_keys=True, separators=(",", ":"))
    return fn


def group_for_dataset(p):
    def fn(f):
        del f[p]
        g = f.create_group(p)
        put(f, p + "/x", np.zeros(4, dtype=np.int32), "int32")
        del g
    return fn


def reshape(p):
    """The same bytes with one more leading dim."""
    def fn(f):
        a = f[p][()]
        name = f[p].attrs["dtype"]
        put(f, p, a.reshape((1,) + a.shape), name)
    return fn


def as_float32(p):
    """A bfloat16 (uint16) dataset stored as float32 of the same shape."""
    def fn(f):
        a = f[p][()].astype(np.uint32) << 16
        put(f, p, a.view(np.float32), "float32")
    return fn


def extra(p, dataset=True):
    def fn(f):
        if dataset:
            put(f, p, np.zeros(2, dtype=np.int32), "int32")
        else:
            f.create_group(p)
    return fn


def skipped_not_string(f):
    for k in list(f[F32]):
        del f[F32 + "/" + k]
    f[F32].attrs.create("skipped", 1, dtype=np.int64)


def spec_flip(p, key, value):
    """The spec text changed under a case's attrs_digest (kept as it was)."""
    def fn(f):
        s = json.loads(f[p].attrs["spec"])
        s[key] = value
        f[p].attrs["spec"] = json.dumps(s, sort_keys=True, separators=(",", ":"))
    fn.keeps_attrs_digest = True
    return fn


# (file name, edit, the words the refusal names besides the file)
FILES = [
    # attribute text under the case's attribute digest (item 11): the input
    # seed is cross-checked with nothing else
    ("validate-spec-seed-under-attrs-digest.h5", spec_flip(F32, "seed", 2),
     r"attributes corrupt"),
    # save_ctx values replay would compute with (items 1, 6, 7)
    ("validate-thd-max-seqlen-2p62.h5",
     set_attr(THD + "/save_ctx", "max_seqlen_q", np.int64(1 << 62)), r"max_seqlen_q"),
    ("validate-thd-max-seqlen-2p30.h5",
     set_attr(THD + "/save_ctx", "max_seqlen_q", np.int64(1 << 30)), r"max_seqlen_q"),
    ("validate-window-int64-max.h5",
     set_attr(F32 + "/save_ctx", "window_size",
              np.array([2**63 - 1, 2**63 - 1], dtype=np.int64)), r"window_size"),
    ("validate-window-not-the-spec.h5",
     set_attr(F32 + "/save_ctx", "window_size", np.array([1, 0], dtype=np.int64)),
     r"window_size"),
    ("validate-attn-scale-huge.h5",
     set_attr(F32 + "/save_ctx", "attn_scale", np.float32(1e30)), r"attn_scale"),
    ("validate-dropout-not-the-spec.h5",
     set_attr(THD + "/save_ctx", "dropout_p", np.float32(0.5)), r"dropout_p"),
    ("validate-mask-not-the-spec.h5",
     set_attr(F32 + "/save_ctx", "attn_mask_type", "no_mask"), r"attn_mask_type"),
    # a small file whose spec asks for GBs of inputs (item 5)
    ("validate-spec-shapes-huge.h5",
     spec_edit(F32, h=64, sq=16384, skv=16384, d_qk=128, d_v=128), r"inputs/\w+ is"),
    # structure (item 10)
    ("validate-dq-is-a-group.h5", group_for_dataset(F32 + "/backward/dq"),
     r"backward/dq is a group where a dataset belongs"),
    ("validate-out-wrong-shape.h5", reshape(F32 + "/forward/out"), r"forward/out is float32"),
    ("validate-out-wrong-dtype.h5", as_float32(THD + "/forward/out"),
     r"forward/out is float32 .*bfloat16"),
    ("validate-stats-wrong-shape.h5", reshape(THD + "/save_ctx/softmax_stats"),
     r"save_ctx/softmax_stats is float32"),
    ("validate-impl-slot-wrong-shape.h5", reshape(THD + "/forward/_impl/softmax_stats"),
     r"forward/_impl/softmax_stats"),
    ("validate-extra-dataset.h5", extra(F32 + "/forward/extra"), r"forward/extra: unknown"),
    ("validate-extra-aux-group.h5", extra(F32 + "/forward/aux/more", dataset=False),
     r"forward/aux/more: unknown"),
    ("validate-extra-state.h5", extra(F32 + "/later", dataset=False), r"later: unknown"),
    ("validate-extra-root.h5", extra("extra", dataset=True), r"/extra: unknown"),
    ("validate-skipped-not-string.h5", skipped_not_string, r"skipped is not a string"),
]


def main():
    global XXH
    fattn, XXH = sys.argv[1], sys.argv[2]
    out_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "cases.json")
        base = os.path.join(tmp, "base.h5")
        with open(spec, "w") as f:
            json.dump(CASES, f)
        env = dict(os.environ, SOURCE_DATE_EPOCH="0")
        subprocess.run([fattn, "run", "--backend", "cpu", "--impl", "split", "--cases", spec,
                        "-o", base], check=True, env=env, capture_output=True)
        for name, fn, _ in FILES:
            dst = os.path.join(out_dir, name)
            with open(base, "rb") as src, open(dst, "wb") as d:
                d.write(src.read())
            with h5py.File(dst, "r+") as f:
                if not getattr(fn, "keeps_attrs_digest", False):
                    for c in f["cases"].values():
                        if "attrs_digest" in c.attrs:
                            del c.attrs["attrs_digest"]
                fn(f)
            print(dst)


if __name__ == "__main__":
    main()
