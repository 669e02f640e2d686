"""The exact signatures of the documented differences (verify.DEVIATIONS;
docs/te.md, "The table of documented deviations"). A difference in a
documented place matches its entry only when the runs show exactly what
the entry documents: for a change, the exception (type, message, TE
file:line) in the run that refuses and the value in the run that runs; for
a deviation, the values on both sides. Each check returns None when the
signature holds, else what was seen instead, which verify prints under the
verdict (the difference is then counted)."""
import json
import re

import numpy as np

# F1 (docs/te.md, Findings): TE 2.19.0's FP8 branch leaves max_logit None
# and unpacks it (`return out_ret, *max_logit`, backends.py:1751).
F1_RAISE = {"type": "TypeError", "message": "Value after * must be an iterable, not NoneType",
            "te_line": "transformer_engine/pytorch/attention/dot_product_attention/"
                       "backends.py:1751"}
F1_RULE = "fp8_max_logit"  # fattn's support rule for the case


class Pair:
    """What a signature reads of a pair's two runs: the run files, and for a
    TE run its refusal log (refusal.py: TE's exception for each refused
    case it was asked), None for a fattn front end's run."""

    def __init__(self, names, files, logs):
        self.names, self.files = names, files
        self.logs = [None if lg is None else {e["case"]: e for e in lg} for lg in logs]
        self._h5 = [None, None]

    def h5(self, i):
        if self._h5[i] is None:
            import h5py
            self._h5[i] = h5py.File(self.files[i], "r")
        return self._h5[i]

    def close(self):
        for f in self._h5:
            if f is not None:
                f.close()

    def node(self, i, path):
        return self.h5(i).get(path)

    def case_attrs(self, i, cid):
        g = self.h5(i).get(f"/cases/{cid}")
        if g is None:
            return {}
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in g.attrs.items()}

    def values(self, i, path):
        """(raw bits, float values) of a dataset, or None."""
        ds = self.node(i, path)
        if ds is None or not hasattr(ds, "shape"):
            return None
        dt = ds.attrs.get("dtype")
        dt = dt.decode() if isinstance(dt, bytes) else dt
        raw = np.asarray(ds[()])
        if dt == "bfloat16":
            bits = raw.view(np.uint16)
            vals = (bits.astype(np.uint32) << 16).view(np.float32)
        elif dt == "float16":
            bits, vals = raw.view(np.uint16), raw.astype(np.float32)
        elif dt == "float32":
            bits, vals = raw.view(np.uint32), raw
        else:
            return None
        return dt, bits.reshape(-1), vals.reshape(-1)


def f1(pair, cid, side):
    """F1: the refusing run refused with exactly 2.19.0's TypeError at
    backends.py:1751 (a TE) or fattn's rule fp8_max_logit (a fattn front
    end); the running run ran, its forward/out recorded and max_logit None
    (no dataset), as 2.20.2 returns (out, None)."""
    r = 0 if side == "a" else 1
    ran = 1 - r
    log = pair.logs[r]
    if log is None:
        rule = pair.case_attrs(r, cid).get("refused_rule")
        if rule != F1_RULE:
            return f"{pair.names[r]} refused it by rule {rule!r}, F1's is {F1_RULE}"
    else:
        e = log.get(cid, {})
        got = {k: e.get(k) for k in F1_RAISE}
        if e.get("te") != "raised" or got != F1_RAISE:
            return (f"{pair.names[r]} refused it with {got['type']}: {got['message']} "
                    f"({got['te_line']}); F1 is {F1_RAISE['type']}: {F1_RAISE['message']} "
                    f"({F1_RAISE['te_line']})")
    if pair.node(ran, f"/cases/{cid}/forward/out") is None:
        return f"{pair.names[ran]} recorded no forward/out"
    ml = pair.values(ran, f"/cases/{cid}/forward/max_logit")
    if ml is not None:
        return (f"{pair.names[ran]} returned max_logit {ml[2].tolist()}; F1's running release "
                f"returns None")
    log = pair.logs[ran]
    if log is not None and log.get(cid, {}).get("te") != "ran":
        return f"{pair.names[ran]}'s refusal log does not say it ran"
    return None


def _differing(pair, path):
    a, b = pair.values(0, path), pair.values(1, path)
    if a is None or b is None or a[1].shape != b[1].shape:
        return None
    d = a[1] != b[1]
    return a, b, d


def max_logit_nan(pair, path):
    """TE's amax over rows past the lengths: NaN in TE's run (the pair's B)
    wherever the two differ, finite in fattn's (A)."""
    got = _differing(pair, path)
    if got is None:
        return "not two float datasets of one shape"
    a, b, d = got
    if not (np.isnan(b[2][d]).all() and np.isfinite(a[2][d]).all()):
        return (f"{pair.names[1]} has {b[2][d].tolist()} where {pair.names[0]} has "
                f"{a[2][d].tolist()}; the deviation is NaN against finite")
    return None


def _torch_nan(fp8_name, nominal):
    """The bits torch's CPU dequantisation gives an FP8 code 0xFF (what TE's
    _FromFloat8Func does with the engine's poison: float8 -> float32, times
    scale_inv, -> the nominal dtype)."""
    import torch
    f8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fp8_name]
    nt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[nominal]
    x = torch.tensor([0xFF], dtype=torch.uint8).view(f8).float() * torch.ones(1)
    return int(x.to(nt).view(torch.int16).item()) & 0xFFFF


def fp8_nan_payload(pair, path):
    """Rows an FP8 padding case leaves unwritten: fattn's side (A) a NaN,
    TE's side (B) exactly the bits torch's dequantisation gives the code
    0xFF (E4M3 for forward/out, E5M2 for the gradients)."""
    got = _differing(pair, path)
    if got is None:
        return "not two float datasets of one shape"
    a, b, d = got
    if a[0] not in ("bfloat16", "float16"):
        return f"a {a[0]} tensor; the deviation is of f16/bf16 ones"
    want = _torch_nan("e4m3" if path.endswith("/forward/out") else "e5m2", a[0])
    tb = set(int(x) for x in np.unique(b[1][d]))
    if not np.isnan(a[2][d]).all() or tb != {want}:
        return (f"{pair.names[1]} has bits {sorted(hex(x) for x in tb)} where the two differ "
                f"(torch's NaN is {hex(want)}), {pair.names[0]} NaN: "
                f"{bool(np.isnan(a[2][d]).all())}")
    return None


def load_log(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# P1 (docs/te.md, context parallelism): the ring's outputs merged per step.

def load(d):
    """A dataset's values as float64 (bfloat16 widened from its uint16 bits)."""
    a = d[()]
    if d.attrs["dtype"] == "bfloat16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64)


def valid_tokens(case):
    """THD: which global tokens lie within their sequence's length (the
    rest is padding, undefined); None for bshd/sbhd."""
    if "cu_seqlens_q_padded" not in case["inputs"]:
        return None
    cu, cup = case["inputs/cu_seqlens_q"][()], case["inputs/cu_seqlens_q_padded"][()]
    valid = np.zeros(int(cup[-1]), bool)
    for b in range(len(cu) - 1):
        valid[cup[b]:cup[b] + cu[b + 1] - cu[b]] = True
    return valid


_ROWS_OF_Q = re.compile(r"^/cases/([^/]+)/ranks/(\d+)/(?:forward/out|engine_call/backward/"
                        r"\d{3}/o)$")


def p1(pair, path):
    """P1's exact signature for one differing tensor (verify.DEVIATIONS):
    None when every finite pair is within TE's CP atol of each other and
    every NaN/Inf-vs-finite element lies in a THD token past its
    sequence's valid length (rows of the rank's q tokens: forward/out and
    the out its backward steps read); else what the runs show."""
    x, y = load(pair.node(0, path)), load(pair.node(1, path))
    changed = np.isfinite(x) != np.isfinite(y)
    if not changed.any():
        return None  # the entry checked the finite pairs' max abs
    m = _ROWS_OF_Q.match(path)
    case = pair.node(0, f"/cases/{m.group(1)}") if m else None
    valid = valid_tokens(case) if case is not None else None
    if valid is None:
        return f"{int(changed.sum())} NaN/Inf vs finite outside a THD rank's out"
    idx = case[f"ranks/{m.group(2)}/inputs/token_index_q"][()]
    if x.shape[0] * 2 == idx.shape[0]:
        # a backward step of the upper triangle reads the second half of
        # each of the rank's sequences (thd_read_half_tensor(x, ..., 1),
        # context_parallel.py 2.19.0:1300 / 2.20.2:1289): the rank's own
        # cu_seqlens are the padded ones over the CP size
        size = len(case["ranks"])
        cs = case["inputs/cu_seqlens_q_padded"][()] // size // 2
        seq = np.searchsorted(cs, np.arange(x.shape[0]), side="right") - 1
        idx = idx[np.arange(x.shape[0]) + cs[np.minimum(seq + 1, len(cs) - 1)]]
    elif x.shape[0] != idx.shape[0]:
        return f"rows {x.shape[0]} that are not the rank's {idx.shape[0]} tokens"
    rows = np.nonzero(changed.reshape(changed.shape[0], -1).any(axis=1))[0]
    bad = valid[idx[rows]]
    if bad.any():
        return (f"NaN/Inf vs finite in {int(bad.sum())} token(s) within a sequence's length "
                f"(first: row {int(rows[bad][0])})")
    return None
