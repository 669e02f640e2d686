#!/usr/bin/python3
"""h5py reads what fattn's run-file writer wrote (TAP).

Usage: test_h5py_read.py H5IO_SAMPLE_EXE

Without h5py the test is skipped (TAP "1..0 # SKIP"), except under CI=true,
where a missing h5py is a failure: CI must exercise this path.
"""
import math
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import tap  # noqa: E402  (tests/tap.py, beside this script; need_modules only)

results = []


def check(name, cond, detail=""):
    results.append((bool(cond), name, detail))


def main():
    h5py, np = tap.need_modules("h5py", "numpy")

    with tempfile.TemporaryDirectory(prefix="fattn-h5py-") as d:
        path = os.path.join(d, "sample.h5")
        subprocess.run([sys.argv[1], path], check=True)
        with h5py.File(path, "r") as f:
            check("root schema attr is str", f.attrs["schema"] == "fattn-run/1",
                  repr(f.attrs["schema"]))
            check("utf-8 attr reads as str", f.attrs["note"] == "h\u00e9llo",
                  repr(f.attrs["note"]))
            g = f["t"]
            half = g["half"]
            check("float16 dataset reads as float16", half.dtype == np.float16, str(half.dtype))
            v = half[()]
            check("float16 values", list(v[:4]) == [1.0, -2.0, 65504.0, 2.0 ** -24], repr(v))
            check("float16 inf", math.isinf(v[4]) and v[4] > 0, repr(v[4]))
            check("float16 nan", math.isnan(v[5]), repr(v[5]))
            check("float16 -0", v[6] == 0.0 and math.copysign(1.0, float(v[6])) < 0, repr(v[6]))
            check("float16 0.5", v[7] == 0.5, repr(v[7]))
            check("float16 raw bits", v.view(np.uint16).tolist()
                  == [0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x7E00, 0x8000, 0x3800])
            check("dtype attr float16", half.attrs["dtype"] == "float16", repr(half.attrs["dtype"]))
            dg = half.attrs["digest"]
            check("digest attr format", isinstance(dg, str) and dg.startswith("xxh3-128:")
                  and len(dg) == 41 and all(c in "0123456789abcdef" for c in dg[9:]), repr(dg))
            bf = g["bf"]
            check("bfloat16 stored as uint16", bf.dtype == np.uint16, str(bf.dtype))
            check("bfloat16 dtype attr", bf.attrs["dtype"] == "bfloat16")
            check("bfloat16 bits", bf[()].tolist() == [0x3F80, 0xC000, 0x3F00, 0x8000])
            s = g["single"]
            check("float32", s.dtype == np.dtype("<f4") and s.shape == (2, 3)
                  and s[0, 1] == -2.5 and math.copysign(1.0, float(s[1, 1])) < 0)
            cu = g["cu"]
            check("int32", cu.dtype == np.dtype("<i4") and cu[()].tolist() == [0, 5, 12])
            check("int64 attr", int(g.attrs["i64"]) == -7 and g.attrs["i64"].dtype == np.int64)
            check("float32 attr", g.attrs["f32"] == 0.125 and g.attrs["f32"].dtype == np.float32)
            check("uint8 attr", g.attrs["u8"] == 1 and g.attrs["u8"].dtype == np.uint8)
            check("int64[2] attr", g.attrs["window_size"].tolist() == [-1, 0])
            check("children sorted", list(g.keys()) == sorted(g.keys()))

    print("1..%d" % len(results))
    failed = 0
    for i, (ok, name, detail) in enumerate(results, 1):
        print("%s %d - %s%s" % ("ok" if ok else "not ok", i, name,
                                "" if ok or not detail else " # " + detail))
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
