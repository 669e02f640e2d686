"""The arguments TE hands the engine, call by call: the shim's fused_attn_fwd /
fused_attn_bwd note every argument of the executing engine call (what TE's
C++ would hand nvte_fused_attn_fwd/bwd), and record.py writes them as the
run file's engine_call/ groups, exactly as fattn's own runner writes its
front ends' (harness/run/engine_call.h; docs/run-files.md, "Engine calls"):
scalars under the engine API's names, each tensor as one string
"<dtype> [<shape>] strides [<strides>] <source> <digest>", named by the
recorded tensor it is. So fattn diff and fattn-te verify compare TE's calls
with fattn's and with another TE's like any state."""
import ctypes

import numpy as np
import torch

from . import bridge

# fattn/dtype.h's names of bridge._DTYPES' codes
_DTYPE_NAME = {1: "float32", 2: "float16", 3: "bfloat16", 4: "float8_e4m3fn",
               5: "float8_e5m2", 6: "int32", 7: "int64", 8: "uint8"}

pending = []  # [(direction, attrs, [(name, descriptor)])], in call order
recording = False  # between reset() and groups(): a case run that record.py writes


def reset():
    """Start noting (record.py, before a case run)."""
    global recording
    pending.clear()
    recording = True


def _enum_name(fn, value):
    """fattn's name of one of TE's enums (the values are TE's, fattn/te.h):
    the library's own table, so both writers spell it alike."""
    lib = bridge.engine().lib
    f = getattr(lib, fn)
    f.restype = ctypes.c_char_p
    f.argtypes = [ctypes.c_int]
    return f(int(value)).decode()


def _digest(t):
    """The C-order content of the view, as the run file digests tensors."""
    from fattn_runfile import digest
    x = t.detach().contiguous().cpu().reshape(-1)
    if x.numel() == 0:
        return digest(b"")
    return digest(x.view(torch.uint8).numpy().tobytes())


class Noted:
    """One tensor argument: its view and content at the call."""

    def __init__(self, t):
        self.dtype = _DTYPE_NAME[bridge._DTYPES[t.dtype]]
        self.shape = list(t.shape)
        self.strides = list(t.stride())
        self.ptr = t.data_ptr()
        # a CUDA tensor (DPA on a GPU runner) is digested through a host copy,
        # so that its record compares with fattn's
        self.digest = _digest(t)

    def text(self, names):
        return (f"{self.dtype} [{','.join(map(str, self.shape))}] strides "
                f"[{','.join(map(str, self.strides))}] {source(names, self.ptr)} {self.digest}")


def _u8(b):
    return np.uint8(bool(b))


def _common(p, kind):
    """The scalars both calls share (fattn_attn_common), by the API's names."""
    return [("max_seqlen_q", np.int64(p.max_seqlen_q)),
            ("max_seqlen_kv", np.int64(p.max_seqlen_kv)),
            ("attn_scale", np.float32(p.attn_scale)), ("dropout", np.float32(p.dropout)),
            ("qkv_layout", _enum_name("fattn_layout_name", p.qkv_layout)),
            ("o_format", _enum_name("fattn_format_name", p.o_format)),
            ("bias_type", _enum_name("fattn_bias_type_name", p.bias_type)),
            ("mask_type", _enum_name("fattn_mask_type_name", p.mask_type)),
            ("softmax_type", _enum_name("fattn_softmax_type_name", p.softmax_type)),
            ("window_size_left", np.int64(p.window_size_left)),
            ("window_size_right", np.int64(p.window_size_right)),
            ("bottom_right_diagonal", _u8(p.bottom_right_diagonal)),
            ("cuda_graph", _u8(p.cuda_graph))]


def _fp8(fp8, floats, amaxes, dtypes):
    if fp8 is None:
        return []
    prm = fp8.params
    out = [(f"fp8.{n}", np.float32(getattr(prm, n))) for n in floats]
    out += [(f"fp8.{n}", _u8(bool(getattr(prm, n)))) for n in amaxes]
    out += [(f"fp8.{n}", _DTYPE_NAME[int(getattr(prm, n))]) for n in dtypes]
    return out


def note_fwd(p, tensors, fp8):
    """The executing forward call: p (bridge.FwdParams), tensors the
    torch tensors by argument name (aux[i] the pack's entries as the
    engine gets them), fp8 the call's FP8 state or None. Only while
    recording: a run record.py does not write (fattn-te's CP ranks, which
    cp_worker.py records itself) notes nothing."""
    if not recording:
        return
    attrs = _common(p, "fwd") + [("is_training", _u8(p.is_training)),
                                 ("return_max_logit", _u8(p.return_max_logit))]
    attrs += _fp8(fp8, ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s",
                        "scale_o"), ("amax_s", "amax_o"), ("s_dtype",))
    pending.append(("forward", attrs, [(n, Noted(t)) for n, t in tensors if t is not None]))


def note_bwd(p, tensors, fp8):
    if not recording:
        return
    attrs = _common(p, "bwd") + [
        ("do_format", _enum_name("fattn_format_name", p.do_format)),
        ("dqkv_layout", _enum_name("fattn_layout_name", p.dqkv_layout)),
        ("deterministic", _u8(p.deterministic))]
    attrs += _fp8(fp8, ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do",
                        "descale_s", "scale_s", "descale_dp", "scale_dp", "scale_dq",
                        "scale_dk", "scale_dv"), ("amax_dp", "amax_dq", "amax_dk", "amax_dv"),
                  ("s_dtype", "dp_dtype"))
    pending.append(("backward", attrs, [(n, Noted(t)) for n, t in tensors if t is not None]))


def _span(t):
    """The bytes a view's elements span: (lo, hi)."""
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0 and st > 0)
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def source(names, ptr):
    """"<name>[+<offset>]": the first named tensor starting at ptr, else the
    first whose elements hold it; "unrecorded" when none."""
    for name, t in names:
        if t.data_ptr() == ptr:
            return name
    for name, t in names:
        lo, hi = _span(t)
        if lo < ptr < hi:
            off = ptr - lo
            es = t.element_size()
            return f"{name}+{off // es}" if off % es == 0 else f"{name}+{off}B"
    return "unrecorded"


def named(prefix, tensors):
    """[(prefix + name, torch tensor)] of the recorded ones (a Float8Tensor
    by its codes, which is what the engine gets), empty slots left out."""
    out = []
    for name, t in tensors:
        if t is None:
            continue
        if bridge.is_float8(t):
            t = t._data
        if isinstance(t, torch.Tensor) and t.numel():
            out.append((prefix + name, t))
    return out


def groups(fwd_names, bwd_names):
    """The pending calls as engine_call/ groups (record.py's tree form),
    each tensor named by the names of its direction, in the order given;
    then forgotten."""
    children, seen = {}, {"forward": 0, "backward": 0}
    for direction, attrs, tensors in pending:
        seen[direction] += 1
        k = seen[direction]
        name = direction if k == 1 else f"{direction}.{k}"
        names = fwd_names if direction == "forward" else bwd_names
        a = [(n, v, v.dtype if hasattr(v, "dtype") else None) for n, v in attrs]
        a += [(n, x.text(names), None) for n, x in tensors]
        children[name] = {"attrs": sorted(a, key=lambda x: x[0]), "children": {}}
    global recording
    pending.clear()
    recording = False
    return children
