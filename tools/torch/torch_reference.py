#!/usr/bin/env python3
"""Recompute the cases of a fattn run file with PyTorch's cuDNN SDPA.

usage:
  torch_reference.py RUN.h5 -o TORCH.h5 [--report R.json]
  torch_reference.py --make-cases [SPEC.json] -o OUT.json [--report R.json]

The first form reads a fattn run file (docs/run-files.md), recomputes every
case that PyTorch can express -- the same cuDNN graph reached through
PyTorch's SDPA (docs/torch.md lists the rules) -- on the recorded input bits,
and writes a run file in fattn's schema, so that

    fattn diff RUN.h5 TORCH.h5

compares fattn's tensors with PyTorch's bit for bit. Each written case is the
case group of RUN.h5 copied verbatim with only the tensors PyTorch
recomputed replaced: forward/out, forward/aux/softmax_stats, their copies in
save_ctx/ (and forward/_impl/), and backward/dq, dk, dv. A case PyTorch
cannot express is not written; it is printed to stderr with the reason and
listed in the report.

The second form writes the expressible subset of a case-spec file (default:
golden/default_cases.json) with `deterministic` false, the backward PyTorch's
graph uses; fattn runs that file on the GPU, this tool recomputes the result.

Exit status: 0 done; 1 the file was written but PyTorch failed on some
expressible case (named on stderr and in the report); 2 usage error, or a
bad input file (named with the case and cause), nothing written.

Needs numpy and h5py; torch only to compute (so --help, --make-cases and
the tests run without it). Digests: the xxhash module when installed, else
libxxhash through ctypes, else the plain implementation below.
"""
import argparse
import ctypes
import ctypes.util
import datetime
import json
import os
import sys
import tempfile

SCHEMA = "fattn-run/1"
DIGEST_PREFIX = "xxh3-128:"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SPEC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "golden",
                            "default_cases.json")


class InputError(Exception):
    """A bad input (exit 2); the message names the file, case and cause."""


# --------------------------------------------------------------------------
# Case specs (docs/cases.md): defaults, TE's layouts, window normalisation
# --------------------------------------------------------------------------

# Every key with its default; `hg`, `skv`, `d_v` default to another key.
SPEC_DEFAULTS = {
    "dtype": "bfloat16", "layout": "bshd_bshd_bshd", "mask": "no_mask",
    "bias": "no_bias", "bias_shape": "1hss", "softmax": "vanilla", "window": None,
    "bottom_right_diagonal": None, "dropout_p": 0.0, "is_training": True,
    "deterministic": True, "return_max_logit": False, "fast_zero_fill": True,
    "attn_scale": None, "pad_between_seqs": False, "seqlens_q": None,
    "seqlens_kv": None, "seed": 1, "rng_seed": 1234, "rng_offset": 0,
}
SPEC_REQUIRED = ("id", "b", "h", "sq", "d_qk")
SPEC_KEYS = set(SPEC_REQUIRED) | {"hg", "skv", "d_v"} | set(SPEC_DEFAULTS)

# TE's QKV layouts (lib/core/te.c): name -> (group, q format, kv format).
LAYOUTS = {}
for _fmt in ("sbhd", "bshd"):
    _p = _fmt[:2]
    LAYOUTS.update({
        _p + "3hd": ("3hd", _fmt, _fmt), _p + "h3d": ("h3d", _fmt, _fmt),
        "%s_%s2hd" % (_fmt, _p): ("hd_2hd", _fmt, _fmt),
        "%s_%sh2d" % (_fmt, _p): ("hd_h2d", _fmt, _fmt),
        "%s_%s_%s" % (_fmt, _fmt, _fmt): ("hd_hd_hd", _fmt, _fmt),
    })
LAYOUTS.update({
    "t3hd": ("3hd", "thd", "thd"), "th3d": ("h3d", "thd", "thd"),
    "thd_t2hd": ("hd_2hd", "thd", "thd"), "thd_th2d": ("hd_h2d", "thd", "thd"),
    "thd_thd_thd": ("hd_hd_hd", "thd", "thd"),
    "sbhd_bshd_bshd": ("hd_hd_hd", "sbhd", "bshd"),
    "bshd_sbhd_sbhd": ("hd_hd_hd", "bshd", "sbhd"),
    "thd_bshd_bshd": ("hd_hd_hd", "thd", "bshd"),
    "thd_sbhd_sbhd": ("hd_hd_hd", "thd", "sbhd"),
    "bhsd_bhsd_bhsd": ("sd_sd_sd", "bhsd", "bhsd"),
})
for _name in ("bshd_bshd_bshd", "bshd_sbhd_sbhd", "sbhd_bshd_bshd", "sbhd_sbhd_sbhd",
              "thd_bshd_bshd", "thd_sbhd_sbhd"):
    LAYOUTS["paged_kv_" + _name] = ("paged_kv_hd_hd_hd",) + LAYOUTS[_name][1:]

CAUSAL_MASKS = ("causal", "padding_causal", "causal_bottom_right",
                "padding_causal_bottom_right")


def fill_defaults(case):
    """The spec with every key written out, as the canonical form has it."""
    s = dict(SPEC_DEFAULTS)
    s.update(case)
    s.setdefault("hg", s["h"])
    s.setdefault("skv", s["sq"])
    s.setdefault("d_v", s["d_qk"])
    return s


def normalize_window(mask, window):
    """TE's check_set_window_size (lib/core/te.c fattn_window_normalize)."""
    if mask in CAUSAL_MASKS:
        if window is None:
            return (-1, 0)
        w0, w1 = window
        if (w0 == -1 and w1 == -1) or (w0 >= 0 and w1 != 0):
            return (w0, 0)
        if not (w0 == -1 and w1 == 0) and (w0 < 0 or w1 != 0):
            raise ValueError("window %r is invalid for %s" % (window, mask))
        return (w0, w1)
    if window is None:
        return (-1, -1)
    w0, w1 = window
    if w0 == -1 and w1 == 0:
        return (-1, -1)
    if not (w0 == -1 and w1 == -1) and (w0 < 0 or w1 < 0):
        raise ValueError("window %r is invalid for %s" % (window, mask))
    return (w0, w1)


def resolve_bottom_right(mask, value):
    """bottom_right_diagonal as DotProductAttention resolves it (harness/inputs.c)."""
    if mask in ("causal", "padding_causal"):
        return False
    if mask.endswith("_bottom_right") or value is None:
        return True
    return bool(value)


class Verdict:
    """Whether PyTorch can express a case: forward, and backward separately.

    forward: bool; backward: True/False, or None for an inference case;
    reasons: why the forward is not expressible (empty when it is);
    backward_reason: why the backward is not, when the forward is.
    is_causal, gqa: the SDPA arguments for an expressible case.
    """

    def __init__(self, spec):
        self.spec = spec
        self.reasons = []
        self.backward_reason = None
        self.is_causal = False
        self.gqa = spec["hg"] != spec["h"]

    @property
    def forward(self):
        return not self.reasons

    @property
    def backward(self):
        if not self.forward or not self.spec["is_training"]:
            return None
        return self.backward_reason is None

    def reason(self):
        """One line: why the case (or its backward) is not expressible."""
        if self.reasons:
            return "; ".join(self.reasons)
        return self.backward_reason


def classify(spec):
    """Decide expressibility of a spec with its defaults filled in.

    Expressible means PyTorch's cuDNN SDPA (aten::_scaled_dot_product_cudnn_
    attention, what F.scaled_dot_product_attention dispatches to) builds the
    cuDNN graph fattn's cuDNN engine builds for the case: docs/torch.md.
    """
    v = Verdict(spec)
    r = v.reasons
    if spec["dtype"] not in ("float16", "bfloat16"):
        r.append("%s io: PyTorch's cuDNN attention takes float16/bfloat16 only" % spec["dtype"])
    lay = LAYOUTS.get(spec["layout"])
    if lay is None:
        r.append("unknown layout %s" % spec["layout"])
    elif lay[0].startswith("paged"):
        r.append("paged KV layout: PyTorch's SDPA has no paged KV cache")
    thd = lay is not None and "thd" in lay[1:]
    if thd:  # TE's THD always comes with a padding mask: one reason for both
        r.append("THD layout: PyTorch's cuDNN SDPA is dense [b,h,s,d], no ragged offsets "
                 "or sequence lengths")
    mask = spec["mask"]
    if mask.startswith("padding") and not thd:
        r.append("%s mask: PyTorch's dense cuDNN SDPA passes no sequence lengths" % mask)
    elif mask == "causal_bottom_right" and spec["sq"] != spec["skv"]:
        r.append("bottom-right causal with sq %d != skv %d: PyTorch's is_causal is top-left"
                 % (spec["sq"], spec["skv"]))
    try:
        w = normalize_window(mask, spec["window"])
        if w not in ((-1, -1), (-1, 0)):
            r.append("sliding window (%d, %d): not in PyTorch's SDPA" % w)
    except ValueError as e:
        r.append("%s (TE refuses it)" % e)
    if mask in ("causal", "causal_bottom_right"):
        v.is_causal = True  # top-left; bottom-right only with sq == skv (above)
    bias = spec["bias"]
    if bias == "alibi":
        r.append("ALiBi: not in PyTorch's SDPA")
    elif bias == "pre_scale_bias":
        r.append("pre_scale_bias: TE's F16 path refuses it")
    elif bias == "post_scale_bias" and spec["is_training"]:
        v.backward_reason = ("post_scale_bias backward: TE's graph computes dBias, PyTorch's "
                             "cuDNN backward has no dBias output")
    if spec["softmax"] != "vanilla":
        r.append("%s softmax (sink): not in PyTorch's SDPA" % spec["softmax"])
    if spec["is_training"] and spec["dropout_p"] > 0:
        r.append("dropout %r: PyTorch draws its own Philox mask and offsets"
                 % spec["dropout_p"])
    if spec["return_max_logit"]:
        r.append("return_max_logit: not in PyTorch's SDPA")
    if spec["is_training"] and spec["deterministic"] and v.backward_reason is None:
        v.backward_reason = ("deterministic backward: TE's graph writes dQ directly, PyTorch's "
                             "accumulates it in float32 (make the case with --make-cases)")
    return v


def read_spec_file(path):
    """A case-spec file: a JSON array of case objects (exit 2 when it is not)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError("%s: cannot read: %s" % (path, e.strerror or e))
    try:
        cases = json.loads(text)
    except ValueError as e:
        raise InputError("%s: not JSON: %s" % (path, e))
    if not isinstance(cases, list):
        raise InputError("%s: not a JSON array of case objects" % path)
    seen = set()
    for i, c in enumerate(cases):
        check_case(path, i, c)
        if c["id"] in seen:
            raise InputError("%s: case '%s' (#%d): duplicate id" % (path, c["id"], i + 1))
        seen.add(c["id"])
    return cases


def check_case(source, index, c):
    """The checks classification relies on; fattn's parser checks the rest."""
    if not isinstance(c, dict):
        raise InputError("%s: case #%d: not an object" % (source, index + 1))
    name = c.get("id") if isinstance(c.get("id"), str) else "#%d" % (index + 1)
    where = "%s: case '%s' (#%d)" % (source, name, index + 1)
    for k in c:
        if k not in SPEC_KEYS:
            raise InputError("%s: key '%s': unknown key" % (where, k))
    for k in SPEC_REQUIRED:
        if k not in c:
            raise InputError("%s: key '%s': missing" % (where, k))
    if not isinstance(c["id"], str):
        raise InputError("%s: key 'id': not a string" % where)
    types = {"b": int, "h": int, "hg": int, "sq": int, "skv": int, "d_qk": int, "d_v": int,
             "dtype": str, "layout": str, "mask": str, "bias": str, "bias_shape": str,
             "softmax": str, "is_training": bool, "deterministic": bool,
             "return_max_logit": bool, "dropout_p": (int, float)}
    for k, t in types.items():
        if k in c and (not isinstance(c[k], t) or (t is int and isinstance(c[k], bool))):
            raise InputError("%s: key '%s': wrong type %s" % (where, k, type(c[k]).__name__))
    w = c.get("window")
    if w is not None and not (isinstance(w, list) and len(w) == 2 and
                              all(isinstance(x, int) and not isinstance(x, bool) for x in w)):
        raise InputError("%s: key 'window': not null or [left, right]" % where)
    if c.get("layout", SPEC_DEFAULTS["layout"]) not in LAYOUTS:
        raise InputError("%s: key 'layout': unknown layout '%s'" % (where, c["layout"]))


# --------------------------------------------------------------------------
# Digests: XXH3-128, canonical (big-endian), as harness/digest.c writes them
# --------------------------------------------------------------------------

M64 = (1 << 64) - 1
P32_1, P32_2, P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
P64_1, P64_2, P64_3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P64_4, P64_5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
PMX1, PMX2 = 0x165667919E3779F9, 0x9FB21C651E98DF25
# The default 192-byte secret of the XXH3 specification.
SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")


def _r64(b, i):
    return int.from_bytes(b[i:i + 8], "little")


def _r32(b, i):
    return int.from_bytes(b[i:i + 4], "little")


def _avalanche64(h):  # XXH64's final mix
    h ^= h >> 33
    h = (h * P64_2) & M64
    h ^= h >> 29
    h = (h * P64_3) & M64
    return h ^ (h >> 32)


def _avalanche3(h):
    h ^= h >> 37
    h = (h * PMX1) & M64
    return h ^ (h >> 32)


def _fold(a, b):  # 64x64 -> 128 multiply, halves xor-ed
    p = a * b
    return (p ^ (p >> 64)) & M64


def _mix16(data, i, s):
    return _fold(_r64(data, i) ^ _r64(SECRET, s), _r64(data, i + 8) ^ _r64(SECRET, s + 8))


def _mix32(lo, hi, data, i1, i2, s):
    lo = (lo + _mix16(data, i1, s)) & M64
    lo ^= (_r64(data, i2) + _r64(data, i2 + 8)) & M64
    hi = (hi + _mix16(data, i2, s + 16)) & M64
    hi ^= (_r64(data, i1) + _r64(data, i1 + 8)) & M64
    return lo, hi


def _final_mid(lo, hi, n):
    low = _avalanche3((lo + hi) & M64)
    high = (lo * P64_1 + hi * P64_4 + n * P64_2) & M64
    return low, (-_avalanche3(high)) & M64


def _xxh3_long(data, np):
    """Inputs over 240 bytes: 8 lanes accumulated over 64-byte stripes."""
    n = len(data)
    acc = np.array([P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1], dtype=np.uint64)
    key = np.frombuffer(SECRET, dtype="<u8")
    # stripe k of a block reads the secret from byte 8k: lane keys of 16 stripes
    keys = np.stack([np.frombuffer(SECRET[8 * k:8 * k + 64], dtype="<u8") for k in range(16)])
    lo32 = np.uint64(0xFFFFFFFF)
    swap = [1, 0, 3, 2, 5, 4, 7, 6]

    def accumulate(stripes, k):  # additions commute: a whole block at once
        nonlocal acc
        vals = stripes.astype(np.uint64)
        dk = vals ^ k
        prod = (dk & lo32) * (dk >> np.uint64(32))
        with np.errstate(over="ignore"):
            acc = acc + vals[:, swap].sum(axis=0, dtype=np.uint64) + prod.sum(axis=0,
                                                                           dtype=np.uint64)

    words = np.frombuffer(data, dtype="<u8", count=(n // 8))
    nb_blocks = (n - 1) // 1024
    scramble = key[16:24]  # the secret's last 64 bytes
    for blk in range(nb_blocks):
        accumulate(words[blk * 128:(blk + 1) * 128].reshape(16, 8), keys)
        with np.errstate(over="ignore"):
            acc = ((acc ^ (acc >> np.uint64(47))) ^ scramble) * np.uint64(P32_1)
    stripes = ((n - 1) - 1024 * nb_blocks) // 64
    if stripes:
        start = nb_blocks * 128
        accumulate(words[start:start + 8 * stripes].reshape(stripes, 8), keys[:stripes])
    last = np.frombuffer(data[n - 64:], dtype="<u8").reshape(1, 8)
    accumulate(last, np.frombuffer(SECRET[192 - 64 - 7:192 - 7], dtype="<u8"))
    a = [int(x) for x in acc]

    def merge(s, start):
        r = start
        for i in range(4):
            r = (r + _fold(a[2 * i] ^ _r64(SECRET, s + 16 * i),
                           a[2 * i + 1] ^ _r64(SECRET, s + 16 * i + 8))) & M64
        return _avalanche3(r)

    low = merge(11, (n * P64_1) & M64)
    high = merge(192 - 64 - 11, ~(n * P64_2) & M64)
    return low, high


def xxh3_128_plain(data):
    """XXH3-128 with seed 0 and the default secret: (low64, high64)."""
    import numpy as np
    data = bytes(data)
    n = len(data)
    if n == 0:
        return (_avalanche64(_r64(SECRET, 64) ^ _r64(SECRET, 72)),
                _avalanche64(_r64(SECRET, 80) ^ _r64(SECRET, 88)))
    if n <= 3:
        c = (data[0] << 16) | (data[n >> 1] << 24) | data[n - 1] | (n << 8)
        sw = int.from_bytes(c.to_bytes(4, "little"), "big")
        ch = ((sw << 13) | (sw >> 19)) & 0xFFFFFFFF
        low = _avalanche64(c ^ (_r32(SECRET, 0) ^ _r32(SECRET, 4)))
        high = _avalanche64(ch ^ (_r32(SECRET, 8) ^ _r32(SECRET, 12)))
        return low, high
    if n <= 8:
        x = _r32(data, 0) + (_r32(data, n - 4) << 32)
        keyed = x ^ (_r64(SECRET, 16) ^ _r64(SECRET, 24))
        p = keyed * ((P64_1 + (n << 2)) & M64)
        lo, hi = p & M64, p >> 64
        hi = (hi + (lo << 1)) & M64
        lo ^= hi >> 3
        lo ^= lo >> 35
        lo = (lo * PMX2) & M64
        lo ^= lo >> 28
        return lo, _avalanche3(hi)
    if n <= 16:
        flo = _r64(SECRET, 32) ^ _r64(SECRET, 40)
        fhi = _r64(SECRET, 48) ^ _r64(SECRET, 56)
        ilo, ihi = _r64(data, 0), _r64(data, n - 8)
        p = (ilo ^ ihi ^ flo) * P64_1
        lo, hi = p & M64, p >> 64
        lo = (lo + ((n - 1) << 54)) & M64
        ihi ^= fhi
        hi = (hi + ihi + (ihi & 0xFFFFFFFF) * (P32_2 - 1)) & M64
        lo ^= int.from_bytes(hi.to_bytes(8, "little"), "big")
        q = lo * P64_2
        low, high = q & M64, ((q >> 64) + hi * P64_2) & M64
        return _avalanche3(low), _avalanche3(high)
    if n <= 128:
        lo, hi = (n * P64_1) & M64, 0
        for k in (3, 2, 1):
            if n > 32 * k:
                lo, hi = _mix32(lo, hi, data, 16 * k, n - 16 * (k + 1), 32 * k)
        lo, hi = _mix32(lo, hi, data, 0, n - 16, 0)
        return _final_mid(lo, hi, n)
    if n <= 240:
        lo, hi = (n * P64_1) & M64, 0
        for i in range(4):
            lo, hi = _mix32(lo, hi, data, 32 * i, 32 * i + 16, 32 * i)
        lo, hi = _avalanche3(lo), _avalanche3(hi)
        for i in range(4, n // 32):
            lo, hi = _mix32(lo, hi, data, 32 * i, 32 * i + 16, 3 + 32 * (i - 4))
        lo, hi = _mix32(lo, hi, data, n - 16, n - 32, 136 - 17 - 16)
        return _final_mid(lo, hi, n)
    return _xxh3_long(data, np)


def _libxxhash():
    """libxxhash's XXH3_128bits through ctypes, or None."""
    class H128(ctypes.Structure):
        _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]
    for name in (ctypes.util.find_library("xxhash"), "libxxhash.so.0"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.XXH3_128bits
        except (OSError, AttributeError):
            continue
        fn.restype = H128
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

        def h(data, fn=fn):
            b = bytes(data)
            r = fn(b, len(b))
            return r.low64, r.high64
        return h
    return None


def _pick_hasher():
    try:
        import xxhash

        def h(data):
            v = xxhash.xxh3_128_intdigest(bytes(data))
            return v & M64, v >> 64
        return h, "xxhash"
    except ImportError:
        pass
    lib = _libxxhash()
    if lib is not None:
        return lib, "libxxhash"
    return xxh3_128_plain, "plain"


_HASHER = None


def digest(data):
    """fattn's digest string of a byte string (or a C-ordered numpy array)."""
    global _HASHER
    if _HASHER is None:
        _HASHER = _pick_hasher()
    if hasattr(data, "tobytes"):
        data = data.tobytes()
    low, high = _HASHER[0](data)
    return DIGEST_PREFIX + "%016x%016x" % (high, low)


# --------------------------------------------------------------------------
# Run files: reading, and writing the way fattn does (harness/h5io.c)
# --------------------------------------------------------------------------

STORAGE = {"float32": "<f4", "float16": "<f2", "bfloat16": "<u2", "float8_e4m3fn": "|u1",
           "float8_e5m2": "|u1", "uint8": "|u1", "int32": "<i4", "int64": "<i8"}


def _h5():
    import h5py
    import numpy as np
    return h5py, np


def load_tree(path):
    """A run file as a plain tree: {"attrs": [(name, value, dtype)], "children":
    {name: node}} for groups, {"attrs", "data", "dtype"} for datasets; every
    dataset's dtype attribute and digest checked (a corrupt input is exit 2)."""
    h5py, np = _h5()
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError) as e:
        raise InputError("%s: not a readable HDF5 file: %s" % (path, e))
    with f:
        schema = f.attrs.get("schema")
        if isinstance(schema, bytes):
            schema = schema.decode()
        if schema != SCHEMA:
            raise InputError("%s: schema is %r, not %r (not a fattn run file)"
                             % (path, schema, SCHEMA))
        if "cases" not in f or not isinstance(f["cases"], h5py.Group):
            raise InputError("%s: no /cases group" % path)

        def attrs_of(obj, where):
            out = []
            for name in sorted(obj.attrs):
                try:
                    val = obj.attrs[name]
                    dt = obj.attrs.get_id(name).dtype
                except (OSError, TypeError, ValueError) as e:
                    raise InputError("%s: %s@%s: unreadable attribute: %s" % (path, where,
                                                                              name, e))
                out.append((name, val, dt))
            return out

        def walk(obj, where):
            if isinstance(obj, h5py.Dataset):
                attrs = dict((n, v) for n, v, _ in attrs_of(obj, where))
                dt = attrs.get("dtype")
                if isinstance(dt, bytes):
                    dt = dt.decode()
                if dt not in STORAGE or np.dtype(STORAGE[dt]) != obj.dtype.newbyteorder("<"):
                    raise InputError("%s: %s: dtype attribute %r does not fit its storage %s"
                                     % (path, where, dt, obj.dtype))
                try:
                    data = np.ascontiguousarray(obj[()])
                except (OSError, TypeError, ValueError) as e:
                    raise InputError("%s: %s: unreadable data: %s" % (path, where, e))
                stored = attrs.get("digest")
                if isinstance(stored, bytes):
                    stored = stored.decode()
                if stored != digest(data):
                    raise InputError("%s: %s: corrupt dataset (stored digest %s, data %s)"
                                     % (path, where, stored, digest(data)))
                return {"attrs": attrs_of(obj, where), "data": data, "dtype": dt}
            node = {"attrs": attrs_of(obj, where), "children": {}}
            for name in sorted(obj):
                child = obj.get(name, getlink=True)
                if not isinstance(child, h5py.HardLink):
                    raise InputError("%s: %s/%s: a link other than a hard link" % (path, where,
                                                                                   name))
                node["children"][name] = walk(obj[name], where.rstrip("/") + "/" + name)
            return node
        root = walk(f, "/")
        root["root_attrs"] = dict((n, v) for n, v, _ in root["attrs"])
    return root


def _attr_value(node, name, default=None):
    for n, v, _ in node["attrs"]:
        if n == name:
            return v.decode() if isinstance(v, bytes) else v
    return default


def _set_attr(node, name, value, dtype=None):
    """Replace or add an attribute, keeping the list sorted by name."""
    attrs = [a for a in node["attrs"] if a[0] != name]
    attrs.append((name, value, dtype))
    node["attrs"] = sorted(attrs, key=lambda a: a[0])


def _del_attr(node, name):
    node["attrs"] = [a for a in node["attrs"] if a[0] != name]


def _target_dir(path):
    """The directory of an output file; refuses to rename over anything but a
    regular file (`-o /dev/null` must not replace the device)."""
    if os.path.lexists(path) and not os.path.isfile(path):
        raise InputError("%s: exists and is not a regular file" % path)
    return os.path.dirname(os.path.abspath(path))


def _rename(tmp, path, d):
    """Rename the finished temporary file over `path`, then fsync the directory."""
    os.replace(tmp, path)
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_tree(path, root):
    """Write a tree as fattn writes run files: libver V18..V110, no object
    timestamps, groups, datasets and attributes in sorted order, variable-length
    UTF-8 strings, contiguous datasets with dtype and digest attributes; to a
    temporary name beside `path`, fsynced, renamed over it, directory fsynced."""
    h5py, np = _h5()
    d = _target_dir(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=d)
    os.close(fd)
    try:
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(h5py.h5f.LIBVER_V18, h5py.h5f.LIBVER_V110)
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        fid = h5py.h5f.create(tmp.encode(), h5py.h5f.ACC_TRUNC, fapl=fapl, fcpl=fcpl)
        with h5py.File(fid) as f:
            _write_group(h5py, np, f, root)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        _rename(tmp, path, d)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_attrs(h5py, np, obj, attrs):
    for name, value, dt in sorted(attrs, key=lambda a: a[0]):
        if isinstance(value, str) or (dt is not None and h5py.check_string_dtype(dt)):
            if isinstance(value, bytes):
                value = value.decode()
            obj.attrs.create(name, value, dtype=h5py.string_dtype("utf-8"))
        else:
            obj.attrs.create(name, value, dtype=dt if dt is not None else None)


def _write_group(h5py, np, g, node):
    _write_attrs(h5py, np, g, node["attrs"])
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    for name in sorted(node["children"]):
        child = node["children"][name]
        if "children" in child:
            gid = h5py.h5g.create(g.id, name.encode(), gcpl=gcpl)
            _write_group(h5py, np, h5py.Group(gid), child)
        else:
            data = np.ascontiguousarray(child["data"],
                                        dtype=np.dtype(STORAGE[child["dtype"]]))
            ds = g.create_dataset(name, data=data, track_times=False)
            attrs = [a for a in child["attrs"] if a[0] not in ("dtype", "digest")]
            attrs += [("dtype", child["dtype"], None), ("digest", digest(data), None)]
            _write_attrs(h5py, np, ds, attrs)


def atomic_write_text(path, text):
    d = _target_dir(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        _rename(tmp, path, d)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------
# Tensors as fattn's engine saw them (harness/inputs.c, lib/core/tensor.c)
# --------------------------------------------------------------------------

def format_shape(fmt, b, s, heads, dim):
    """lib/core/te.c fattn_format_shape for the dense formats."""
    return {"sbhd": [s, b, heads, dim], "bhsd": [b, heads, s, dim]}.get(fmt,
                                                                       [b, s, heads, dim])


# permutation from a format's logical order to [b, h, s, d], and back
TO_BHSD = {"sbhd": (1, 2, 0, 3), "bshd": (0, 2, 1, 3), "bhsd": (0, 1, 2, 3)}
FROM_BHSD = {"sbhd": (2, 0, 1, 3), "bshd": (0, 2, 1, 3), "bhsd": (0, 1, 2, 3)}


def qkv_storage(spec):
    """How the harness allocates q, k, v (alloc_qkv): a list of buffers, each
    (shape, pack axis or None, [tensor names]); packed layouts are views into
    one buffer with the pack axis removed, so they keep its strides."""
    group, qf, kvf = LAYOUTS[spec["layout"]]
    qs = format_shape(qf, spec["b"], spec["sq"], spec["h"], spec["d_qk"])
    ks = format_shape(kvf, spec["b"], spec["skv"], spec["hg"], spec["d_qk"])
    vs = format_shape(kvf, spec["b"], spec["skv"], spec["hg"], spec["d_v"])

    def packed(shape, n, at):
        return shape[:at] + [n] + shape[at:], at

    if group in ("3hd", "h3d"):
        return [packed(qs, 3, 2 if group == "3hd" else 3) + (["q", "k", "v"],)]
    out = [(qs, None, ["q"])]
    if group in ("hd_2hd", "hd_h2d"):
        out.append(packed(ks, 2, 2 if group == "hd_2hd" else 3) + (["k", "v"],))
    else:
        out += [(ks, None, ["k"]), (vs, None, ["v"])]
    return out


def _to_torch(torch, np, arr, dt):
    """A stored array (bfloat16 as uint16 bits) as a CPU torch tensor, same bits."""
    if dt == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(arr))


def _from_torch(torch, np, t, dt):
    """A torch tensor's bits as the array fattn stores (logical shape, C order)."""
    t = t.detach().contiguous().cpu()
    if dt == "bfloat16":
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    return t.numpy().copy()


def build_inputs(torch, np, spec, inputs, device):
    """q, k, v in [b,h,s,d] with the strides fattn's engine used, on `device`."""
    dt = spec["dtype"]
    _, qf, kvf = LAYOUTS[spec["layout"]]
    fmt = {"q": qf, "k": kvf, "v": kvf}
    views = {}
    for shape, at, names in qkv_storage(spec):
        buf = torch.empty(shape, dtype=getattr(torch, dt))
        for m, name in enumerate(names):
            view = buf if at is None else buf.select(at, m)
            src = _to_torch(torch, np, inputs[name]["data"], dt)
            if tuple(src.shape) != tuple(view.shape):
                raise InputError("inputs/%s: shape %s, the spec's layout makes %s"
                                 % (name, list(src.shape), list(view.shape)))
            view.copy_(src)
        buf = buf.to(device)
        for m, name in enumerate(names):
            view = buf if at is None else buf.select(at, m)
            views[name] = view.permute(*TO_BHSD[fmt[name]])
    return views["q"], views["k"], views["v"]


# --------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------

def import_torch():
    try:
        import torch
    except ImportError as e:
        raise InputError("torch is not importable (needed to recompute cases): %s" % e)
    return torch


class Engine:
    """PyTorch, one SDPA backend on one device."""

    def __init__(self, torch, device, backend):
        self.torch = torch
        self.device = device
        self.backend = backend
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.sdpa_kernel = sdpa_kernel
        self.sdpa_backend = {"cudnn": SDPBackend.CUDNN_ATTENTION,
                             "math": SDPBackend.MATH}[backend]
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise InputError("--device %s: torch sees no CUDA device" % device)
        if backend == "cudnn" and not device.startswith("cuda"):
            raise InputError("--sdpa-backend cudnn needs a CUDA device (--device cuda)")

    def provenance(self, src_root):
        """Root attributes: fattn's key set (harness/runfile.c), PyTorch's values."""
        torch = self.torch
        cuda = self.device.startswith("cuda")
        src = src_root["root_attrs"]
        created = os.environ.get("SOURCE_DATE_EPOCH")
        when = (datetime.datetime.fromtimestamp(int(created), datetime.timezone.utc)
                if created and created.isdigit() else
                datetime.datetime.now(datetime.timezone.utc))
        attrs = {
            "schema": SCHEMA, "impl": "torch", "backend": "torch-" + self.backend,
            "fattn_version": src.get("fattn_version", "n/a"),
            "git_rev": src.get("git_rev", "n/a"),
            "device": "cpu", "sm": "n/a", "sm_count": np_int64(0), "cuda_version": "n/a",
            "cudnn_version": "n/a", "cudnn_header_version": "n/a",
            "forced_deterministic_bwd": np_uint8(0),
            "cpu_math_version": src.get("cpu_math_version", np_int64(0)),
            "poison": "none: PyTorch allocates its outputs",
            "created_utc": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "prov_torch_version": str(torch.__version__),
            "prov_sdpa": ("aten::_scaled_dot_product_cudnn_attention" if self.backend == "cudnn"
                          else "F.scaled_dot_product_attention (%s)" % self.backend),
            "prov_source": "%s/%s" % (src.get("impl", "?"), src.get("backend", "?")),
        }
        if cuda:
            idx = torch.device(self.device).index or 0
            props = torch.cuda.get_device_properties(idx)
            attrs["device"] = torch.cuda.get_device_name(idx)
            attrs["sm"] = "sm_%d%d" % torch.cuda.get_device_capability(idx)
            attrs["sm_count"] = np_int64(props.multi_processor_count)
            attrs["cuda_version"] = cuda_version_string(torch)
        if self.backend == "cudnn":
            attrs["cudnn_version"] = str(torch.backends.cudnn.version())
            try:  # the cuDNN PyTorch was compiled against
                maj, mnr, pat = torch._C._cudnn.getCompileVersion()
                attrs["cudnn_header_version"] = str(maj * 10000 + mnr * 100 + pat)
            except (AttributeError, TypeError, ValueError):
                pass
        return attrs

    def compute(self, spec, verdict, inputs, scale, backward):
        """out [b,h,sq,dv], stats [b,h,sq,1] float32 and, when `backward`,
        (dq, dk, dv) in [b,h,s,d]; plus a note on the public-SDPA check."""
        torch = self.torch
        import numpy as np
        q, k, v = build_inputs(torch, np, spec, inputs, self.device)
        bias = None
        if "attn_bias" in inputs:
            bias = _to_torch(torch, np, inputs["attn_bias"]["data"],
                             spec["dtype"]).to(self.device)
        d_out = None
        if backward:
            _, qf, _ = LAYOUTS[spec["layout"]]
            d_out = _to_torch(torch, np, inputs["d_out"]["data"], spec["dtype"])
            d_out = d_out.to(self.device).permute(*TO_BHSD[qf])
        leaves = [t.detach().requires_grad_(backward) for t in (q, k, v)]
        if self.backend == "cudnn":
            res = self._cudnn(leaves, bias, verdict, scale, d_out)
            res["public"] = self._public_check(leaves, bias, verdict, scale, d_out, res)
        else:
            res = self._math(leaves, bias, verdict, scale, d_out)
        return res

    def _cudnn(self, qkv, bias, verdict, scale, d_out):
        torch = self.torch
        # compute_log_sumexp=True: TE always generates Stats, so the graph has
        # it as an output in inference too
        with torch.set_grad_enabled(d_out is not None):
            r = torch.ops.aten._scaled_dot_product_cudnn_attention(
                qkv[0], qkv[1], qkv[2], bias, True, dropout_p=0.0,
                is_causal=verdict.is_causal, return_debug_mask=False, scale=scale)
            out, lse = r[0], r[1]
        res = {"out": out, "stats": lse.reshape(lse.shape[0], lse.shape[1], lse.shape[2], 1)}
        if d_out is not None:
            res["grads"] = torch.autograd.grad(out, qkv, d_out)
        return res

    def _public_check(self, qkv, bias, verdict, scale, d_out, res):
        """Whether F.scaled_dot_product_attention with the cuDNN backend forced
        gives the same bits: the op above is what it dispatches to."""
        torch = self.torch
        if bias is not None and verdict.is_causal:
            return "n/a: the public API takes attn_mask or is_causal, not both"
        leaves = [t.detach().requires_grad_(d_out is not None) for t in qkv]
        try:
            with self.sdpa_kernel([self.sdpa_backend]), \
                    torch.set_grad_enabled(d_out is not None):
                out = torch.nn.functional.scaled_dot_product_attention(
                    leaves[0], leaves[1], leaves[2], attn_mask=bias, dropout_p=0.0,
                    is_causal=verdict.is_causal, scale=scale, enable_gqa=verdict.gqa)
                grads = torch.autograd.grad(out, leaves, d_out) if d_out is not None else ()
        except RuntimeError as e:
            return "refused: %s" % str(e).splitlines()[0]
        def bits(t):
            return t.detach().contiguous().view(torch.int16)
        same = [torch.equal(bits(out), bits(res["out"]))]
        same += [torch.equal(bits(a), bits(b)) for a, b in zip(grads, res.get("grads", ()))]
        return "same bits" if all(same) else "different bits"

    def _math(self, qkv, bias, verdict, scale, d_out):
        """The development path: SDPA's math backend, Stats in float32."""
        torch = self.torch
        causal = verdict.is_causal
        if bias is not None and causal:
            # the public API takes attn_mask or is_causal: fold the mask in
            keep = torch.ones(qkv[0].shape[2], qkv[1].shape[2], dtype=torch.bool,
                              device=bias.device).tril()
            bias, causal = bias.masked_fill(~keep, float("-inf")), False
        with self.sdpa_kernel([self.sdpa_backend]), torch.set_grad_enabled(d_out is not None):
            out = torch.nn.functional.scaled_dot_product_attention(
                qkv[0], qkv[1], qkv[2], attn_mask=bias, dropout_p=0.0, is_causal=causal,
                scale=scale, enable_gqa=verdict.gqa)
            res = {"out": out}
            if d_out is not None:
                res["grads"] = torch.autograd.grad(out, qkv, d_out)
        with torch.no_grad():
            res["stats"] = self._logsumexp(qkv, bias, causal, verdict.gqa, scale)
        return res

    def _logsumexp(self, qkv, bias, causal, gqa, scale):
        """log-sum-exp of the scaled, biased, masked scores, in float32."""
        torch = self.torch
        q, k = qkv[0].float(), qkv[1].float()
        if gqa:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias.float()
        if causal:  # top-left: query i sees keys 0..i
            keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool,
                              device=s.device).tril()
            s = s.masked_fill(~keep, float("-inf"))
        return torch.logsumexp(s, dim=-1, keepdim=True)


def np_int64(x):
    import numpy as np
    return np.int64(x)


def np_uint8(x):
    import numpy as np
    return np.uint8(x)


def cuda_version_string(torch):
    """The CUDA version as harness/runfile.c writes it (1000·major + 10·minor)."""
    try:
        return str(int(torch._C._cuda_getCompiledVersion()))
    except (AttributeError, TypeError, ValueError):
        parts = (torch.version.cuda or "").split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]):
            return str(int(parts[0]) * 1000 + int(parts[1]) * 10)
        return "n/a"


# --------------------------------------------------------------------------
# RUN.h5 -> TORCH.h5
# --------------------------------------------------------------------------

# Where each recomputed tensor is stored (every place it exists in the case).
RECOMPUTED = {
    "out": ("forward/out", "save_ctx/out", "forward/_impl/out"),
    "stats": ("forward/aux/softmax_stats", "save_ctx/softmax_stats",
              "forward/_impl/softmax_stats"),
    "dq": ("backward/dq",), "dk": ("backward/dk",), "dv": ("backward/dv",),
}


def _node(case, rel):
    n = case
    for part in rel.split("/"):
        n = n.get("children", {}).get(part)
        if n is None:
            return None
    return n


def case_verdict(path, cid, case):
    """Classify a recorded case: its spec, then what the file holds."""
    spec_text = _attr_value(case, "spec")
    if not isinstance(spec_text, str):
        raise InputError("%s: case %s: no spec attribute" % (path, cid))
    try:
        raw = json.loads(spec_text)
    except ValueError as e:
        raise InputError("%s: case %s: spec is not JSON: %s" % (path, cid, e))
    check_case("%s: /cases/%s spec" % (path, cid), 0, raw)
    if raw["id"] != cid:
        raise InputError("%s: case %s: spec id is '%s'" % (path, cid, raw["id"]))
    spec = fill_defaults(raw)
    v = classify(spec)
    skipped = _attr_value(case, "skipped")
    if v.forward and skipped is not None:
        v.reasons.append("skipped in the source run: %s" % skipped)
    elif v.forward and _node(case, "forward/out") is None:
        v.reasons.append("no forward state in the source run")
    if v.backward and _node(case, "backward") is None:
        v.backward_reason = "no backward state in the source run"
    if v.forward:  # what PyTorch will read must be there, as data
        group = _node(case, "inputs") or {"attrs": [], "children": {}}
        need = ["q", "k", "v"] + (["d_out"] if v.backward else []) + \
            (["attn_bias"] if spec["bias"] == "post_scale_bias" else [])
        for name in need:
            if name in group.get("children", {}):
                continue
            kept = _attr_value(group, "digest:" + name) is not None
            raise InputError("%s: case %s: inputs/%s is %s" % (
                path, cid, name, "kept as its digest only (a golden fixture?): PyTorch needs "
                "the data of a fattn run file" if kept else "missing"))
    return spec, v


def recompute_case(path, cid, case, spec, v, engine):
    """The case group with PyTorch's tensors in place of fattn's."""
    torch = engine.torch
    import numpy as np
    inputs = case["children"]["inputs"]["children"]
    ctx = _node(case, "save_ctx")
    scale = _attr_value(ctx, "attn_scale") if ctx is not None else None
    if scale is None:  # --until forward: TE's default, as the harness computes it
        scale = spec["attn_scale"]
        if scale is None:
            scale = np.float32(1.0 / np.sqrt(np.float64(spec["d_qk"])))
    scale = float(np.float32(scale))
    if ctx is not None and _attr_value(ctx, "bottom_right_diagonal") is not None:
        brd = bool(_attr_value(ctx, "bottom_right_diagonal"))
        if brd != resolve_bottom_right(spec["mask"], spec["bottom_right_diagonal"]):
            raise InputError("%s: case %s: save_ctx@bottom_right_diagonal disagrees with "
                             "the spec" % (path, cid))
    try:
        res = engine.compute(spec, v, inputs, scale, bool(v.backward))
    except InputError as e:
        raise InputError("%s: case %s: %s" % (path, cid, e))
    _, qf, kvf = LAYOUTS[spec["layout"]]
    dt = spec["dtype"]
    new = {"out": _from_torch(torch, np, res["out"].permute(*FROM_BHSD[qf]), dt),
           "stats": _from_torch(torch, np, res["stats"].float(), "float32")}
    if v.backward:
        for name, g, fmt in zip(("dq", "dk", "dv"), res["grads"], (qf, kvf, kvf)):
            new[name] = _from_torch(torch, np, g.permute(*FROM_BHSD[fmt]), dt)
    out = copy_tree(case)
    replaced = []
    for name, arr in new.items():
        for rel in RECOMPUTED[name]:
            node = _node(out, rel)
            if node is None:
                parent = _node(out, os.path.dirname(rel))
                key = "digest:" + os.path.basename(rel)
                if parent is not None and _attr_value(parent, key) is not None:
                    _set_attr(parent, key, digest(arr))  # a digest-only tensor
                    replaced.append(rel)
                continue
            if node.get("data") is None or node["data"].shape != arr.shape:
                raise InputError("%s: case %s: %s is %s, PyTorch's %s is %s" % (
                    path, cid, rel, None if node.get("data") is None else
                    list(node["data"].shape), name, list(arr.shape)))
            node["data"] = arr
            replaced.append(rel)
    if spec["is_training"] and not v.backward:
        out["children"].pop("backward", None)  # nothing of it is PyTorch's
    fwd = _node(out, "forward")
    if fwd is not None:  # the cuDNN engine config fattn ran is not PyTorch's
        _del_attr(fwd, "prov_engine_tag")
    return out, sorted(replaced), res.get("public")


def copy_tree(node):
    if "children" not in node:
        return {"attrs": list(node["attrs"]), "data": node["data"], "dtype": node["dtype"]}
    return {"attrs": list(node["attrs"]),
            "children": {k: copy_tree(c) for k, c in node["children"].items()}}


def run_reference(args):
    src = load_tree(args.run)
    cases = src["children"]["cases"]["children"]
    verdicts = {}
    for cid in sorted(cases):
        verdicts[cid] = case_verdict(args.run, cid, cases[cid])
    torch = import_torch()
    engine = Engine(torch, args.device, args.sdpa_backend)
    out_cases = {}
    report = []
    failed = 0
    for cid in sorted(cases):
        spec, v = verdicts[cid]
        entry = {"id": cid, "expressible": v.forward, "reason": v.reason(),
                 "backward": v.backward, "written": False}
        if not v.forward:
            print("torch_reference: %s: not expressible: %s" % (cid, v.reason()),
                  file=sys.stderr)
        else:
            if v.backward is False:
                print("torch_reference: %s: forward only: %s" % (cid, v.backward_reason),
                      file=sys.stderr)
            try:
                group, replaced, public = recompute_case(args.run, cid, cases[cid], spec, v,
                                                         engine)
            except InputError:
                raise
            except Exception as e:  # PyTorch refused or failed on this case
                failed += 1
                msg = ("%s: %s" % (type(e).__name__, e)).splitlines()[0]
                entry["error"] = msg
                print("torch_reference: %s: PyTorch failed: %s" % (cid, msg), file=sys.stderr)
            else:
                out_cases[cid] = group
                entry.update({"written": True, "tensors": replaced})
                if public is not None:
                    entry["public_sdpa"] = public
                    if public != "same bits":
                        print("torch_reference: %s: public SDPA check: %s" % (cid, public),
                              file=sys.stderr)
        report.append(entry)
    root = {"attrs": [(k, val, None) for k, val in engine.provenance(src).items()],
            "children": {"cases": {"attrs": list(src["children"]["cases"]["attrs"]),
                                   "children": out_cases}}}
    write_tree(args.output, root)
    n_expr = sum(1 for e in report if e["expressible"])
    print("torch_reference: %d of %d cases expressible, %d written to %s%s" % (
        n_expr, len(report), len(out_cases), args.output,
        ", %d failed in PyTorch" % failed if failed else ""), file=sys.stderr)
    if args.report:
        write_report(args.report, report, {"source": "run", "torch": str(torch.__version__),
                                           "sdpa_backend": args.sdpa_backend,
                                           "device": args.device})
    return 1 if failed else 0


def write_report(path, cases, meta):
    doc = {"schema": "fattn-torch-report/1", "cases": cases}
    doc.update(meta)
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


# --------------------------------------------------------------------------
# --make-cases
# --------------------------------------------------------------------------

def make_case(c):
    """One case of --make-cases: (report entry, the case to write or None).

    `deterministic` becomes false: PyTorch's backward accumulates dQ in
    float32, the graph TE builds for a non-deterministic backward. A case whose
    backward PyTorch still cannot express (post_scale_bias: TE's backward
    computes dBias) becomes an inference case, so that its forward is compared
    and fattn's side records nothing that PyTorch's file lacks."""
    v = classify(fill_defaults(c))
    entry = {"id": c["id"], "expressible": v.forward, "reason": v.reason(),
             "backward": v.backward}
    if not v.forward:
        return entry, None
    c = dict(c)
    c["deterministic"] = False
    changed = {"deterministic": False}
    v = classify(fill_defaults(c))
    if v.backward is False:
        c["is_training"] = False
        changed["is_training"] = False
    entry.update({"reason": v.reason(), "backward": v.backward, "changed": changed})
    return entry, c


def make_cases(args):
    spec_path = args.run or DEFAULT_SPEC
    cases = read_spec_file(spec_path)
    keep, report = [], []
    for c in cases:
        entry, made = make_case(c)
        report.append(entry)
        if made is None:
            print("torch_reference: %s: not expressible: %s" % (c["id"], entry["reason"]),
                  file=sys.stderr)
            continue
        if entry["changed"].get("is_training") is False:
            print("torch_reference: %s: made an inference case: %s"
                  % (c["id"], entry["reason"]), file=sys.stderr)
        keep.append(made)
    text = "[\n" + ",\n".join("  " + json.dumps(c) for c in keep) + "\n]\n"
    atomic_write_text(args.output, text)
    if args.report:
        write_report(args.report, sorted(report, key=lambda e: e["id"]), {"source": "spec"})
    print("torch_reference: %d of %d cases expressible, written to %s"
          % (len(keep), len(cases), args.output), file=sys.stderr)
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="torch_reference.py",
        description="Recompute the expressible cases of a fattn run file with PyTorch's "
                    "cuDNN SDPA and write them as a fattn run file (docs/torch.md).",
        epilog="Workflow: torch_reference.py --make-cases -o torch_cases.json; "
               "fattn run --backend cudnn --cases torch_cases.json -o RUN.h5; "
               "torch_reference.py RUN.h5 -o TORCH.h5 --report R.json; "
               "fattn diff RUN.h5 TORCH.h5 --json D.json; "
               "torch_table.py --report R.json D.json. Exit 0 done, 1 PyTorch failed on "
               "some expressible case (file written without it), 2 usage or bad input.")
    p.add_argument("run", nargs="?", metavar="RUN.h5",
                   help="fattn run file (with --make-cases: the case-spec file, default "
                        "golden/default_cases.json)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="the run file to write (with --make-cases: the spec file)")
    p.add_argument("--report", metavar="FILE.json",
                   help="also write every case's verdict: id, expressible, reason, ...")
    p.add_argument("--make-cases", action="store_true",
                   help="write the expressible subset of a case-spec file, deterministic "
                        "false")
    # development without a GPU: the writer path on CPU torch
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    p.add_argument("--sdpa-backend", default="cudnn", choices=("cudnn", "math"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.make_cases and not args.run:
        p.error("RUN.h5 is required (or --make-cases)")
    if args.run and os.path.exists(args.output) and \
            os.path.realpath(args.output) == os.path.realpath(args.run):
        p.error("-o %s would replace its input" % args.output)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return make_cases(args) if args.make_cases else run_reference(args)
    except InputError as e:
        print("torch_reference: %s" % e, file=sys.stderr)
        return 2
    except OSError as e:
        print("torch_reference: %s: %s" % (e.filename or args.output, e.strerror or e),
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
