"""The shim's fused_attn_fwd / fused_attn_bwd on fattn's engines, through
ctypes on libfattn: what TE's C++ extension (pytorch/csrc/extensions/
attention.cpp) does around nvte_fused_attn_fwd/bwd, as fattn's legacy front
end models it (lib/legacy/legacy.c cites the attention.cpp lines), with
fattn's recorded poison so that the bits match fattn's runs."""
import ctypes
import glob
import os

import torch

MAX_DIMS = 5
AUX_MAX = 5
POISON_BYTE = 0xFF  # the run file's `poison`: outputs filled with 0xFF bytes before each call
RNG_F16_INCREMENT = 16  # philox_cuda_state(16): the f16 backend's rng_elts_per_thread


class BridgeError(RuntimeError):
    pass


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("device", ctypes.c_int),
                ("ndim", ctypes.c_int), ("shape", ctypes.c_int64 * MAX_DIMS),
                ("strides", ctypes.c_int64 * MAX_DIMS)]


class AuxPack(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int), ("t", Tensor * AUX_MAX)]


_T = Tensor
_E = ctypes.c_int  # C enums
_B = ctypes.c_bool


class AttnCommon(ctypes.Structure):  # fattn_attn_common: what both calls share
    _fields_ = [(n, _T) for n in ("q", "k", "v", "o", "cu_seqlens_q", "cu_seqlens_kv",
                                  "cu_seqlens_q_padded", "cu_seqlens_kv_padded")] + [
        ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_kv", ctypes.c_int64),
        ("attn_scale", ctypes.c_float), ("dropout", ctypes.c_float),
        ("qkv_layout", _E), ("o_format", _E), ("bias_type", _E), ("mask_type", _E),
        ("softmax_type", _E), ("window_size_left", ctypes.c_int64),
        ("window_size_right", ctypes.c_int64), ("bottom_right_diagonal", _B),
        ("cuda_graph", _B)]


# `attn` is anonymous here: p.max_seqlen_q reaches p.attn.max_seqlen_q, and the
# offsets _off reports are the outer struct's.
class FwdParams(ctypes.Structure):
    _anonymous_ = ("attn",)
    _fields_ = [("attn", AttnCommon)] + [(n, _T) for n in ("bias", "softmax_offset")] + [
        ("aux", ctypes.POINTER(AuxPack))] + [
        (n, _T) for n in ("page_table_k", "page_table_v", "rng_state")] + [
        ("is_training", _B), ("return_max_logit", _B),
        ("fp8", ctypes.c_void_p)]  # const fattn_fp8_fwd *: NULL on TE's f16 path


class Fp8Fwd(ctypes.Structure):  # fattn_fp8_fwd
    _fields_ = [(n, ctypes.c_float) for n in ("descale_q", "descale_k", "descale_v",
                                              "descale_s", "scale_s", "scale_o")] + [
        ("amax_s", ctypes.POINTER(ctypes.c_float)), ("amax_o", ctypes.POINTER(ctypes.c_float)),
        ("s_dtype", _E)]


class Fp8Bwd(ctypes.Structure):  # fattn_fp8_bwd
    _fields_ = [(n, ctypes.c_float) for n in (
        "descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s",
        "scale_s", "descale_dp", "scale_dp", "scale_dq", "scale_dk", "scale_dv")] + [
        (n, ctypes.POINTER(ctypes.c_float)) for n in ("amax_dp", "amax_dq", "amax_dk",
                                                      "amax_dv")] + [
        ("s_dtype", _E), ("dp_dtype", _E)]


class BwdParams(ctypes.Structure):
    _anonymous_ = ("attn",)
    _fields_ = [("attn", AttnCommon), ("d_o", _T), ("aux", ctypes.POINTER(AuxPack))] + [
        (n, _T) for n in ("dq", "dk", "dv", "d_bias", "d_softmax_offset")] + [
        ("do_format", _E), ("dqkv_layout", _E), ("deterministic", _B),
        ("fp8", ctypes.c_void_p)]  # const fattn_fp8_bwd *: NULL on TE's f16 path


class EngineOptions(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int), ("device", ctypes.c_int),
                ("force_deterministic_bwd", _B), ("timing_iters", ctypes.c_int),
                ("plan_cache", ctypes.c_void_p),
                ("cudnn_settings", ctypes.c_void_p)]  # NULL: the cuDNN engine's defaults


class CudnnSettings(ctypes.Structure):
    """fattn_cudnn_settings (fattn/cudnn.h): only the libraries are set here."""
    _fields_ = [("autotune", _E), ("bwd_native", _B), ("det_ordered", _B),
                ("det_tag", ctypes.c_char_p), ("plan_dir", ctypes.c_char_p),
                ("cudnn_lib", ctypes.c_char_p), ("cudart_lib", ctypes.c_char_p)]


def _env_path(name):
    v = os.environ.get(name)
    return v.encode() if v else None


def _off(st, f):
    return getattr(st, f).offset


# The rows of fattn_bridge_abi (lib/bridge/abi.c), in its order.
_ABI = [ctypes.sizeof(Tensor), _off(Tensor, "dtype"), _off(Tensor, "device"),
        _off(Tensor, "shape"), _off(Tensor, "strides"), ctypes.sizeof(AuxPack), ctypes.sizeof(FwdParams),
        _off(FwdParams, "aux"), _off(FwdParams, "rng_state"), _off(FwdParams, "max_seqlen_q"),
        _off(FwdParams, "attn_scale"), _off(FwdParams, "qkv_layout"),
        _off(FwdParams, "window_size_left"), _off(FwdParams, "bottom_right_diagonal"),
        ctypes.sizeof(BwdParams), _off(BwdParams, "aux"), _off(BwdParams, "dq"),
        _off(BwdParams, "max_seqlen_q"), _off(BwdParams, "qkv_layout"),
        _off(BwdParams, "window_size_left"), _off(BwdParams, "deterministic"),
        ctypes.sizeof(EngineOptions), _off(FwdParams, "fp8"), _off(BwdParams, "fp8"),
        ctypes.sizeof(Fp8Fwd), _off(Fp8Fwd, "amax_s"), _off(Fp8Fwd, "s_dtype"),
        ctypes.sizeof(Fp8Bwd), _off(Fp8Bwd, "amax_dp"), _off(Fp8Bwd, "dp_dtype")]

# fattn/dtype.h
_DTYPES = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.float8_e4m3fn: 4,
           torch.float8_e5m2: 5, torch.int32: 6, torch.int64: 7, torch.uint8: 8}


def find_library():
    """$FATTN_LIB, else the newest build*/lib/libfattn.so of this source tree."""
    lib = os.environ.get("FATTN_LIB")
    if lib:
        return lib
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = sorted(glob.glob(os.path.join(os.path.dirname(root), "build*", "lib",
                                          "libfattn.so")), key=os.path.getmtime)
    if not found:
        raise BridgeError("no libfattn.so: build fattn (meson compile -C build) or set FATTN_LIB")
    return found[-1]


class Engine:
    def __init__(self, kind="cpu", lib=None, deterministic_bwd=False, device=0):
        self.lib = ctypes.CDLL(lib or find_library())
        self.lib.fattn_bridge_abi.restype = ctypes.c_int
        n = self.lib.fattn_bridge_abi(None, 0)
        rows = (ctypes.c_int64 * n)()
        self.lib.fattn_bridge_abi(rows, n)
        got = list(rows)
        self.cpu_math_version = got[-1]
        if got[:-1] != _ABI:
            raise BridgeError(f"libfattn's struct layout {got[:-1]} is not the one "
                              f"bridge.py mirrors {_ABI}: update tools/te/fattn_te/bridge.py")
        self.lib.fattn_last_error.restype = ctypes.c_char_p
        self.lib.fattn_engine_open.restype = ctypes.c_int
        self.lib.fattn_engine_fwd.restype = ctypes.c_int
        self.lib.fattn_engine_bwd.restype = ctypes.c_int
        self.lib.fattn_bridge_fp8_cs_scale.restype = ctypes.c_float
        self.lib.fattn_bridge_fp8_cs_scale.argtypes = [ctypes.c_float, ctypes.c_int,
                                                       ctypes.c_int, ctypes.c_float]
        # The cuDNN the engine loads: $FATTN_CUDNN_LIB and $FATTN_CUDART_LIB, handed over
        # as the CLI does (the library reads no environment), before anything loads it.
        self.lib.fattn_cudnn_use_libraries.restype = ctypes.c_int
        libs = CudnnSettings(cudnn_lib=_env_path("FATTN_CUDNN_LIB"),
                             cudart_lib=_env_path("FATTN_CUDART_LIB"))
        self._check(self.lib.fattn_cudnn_use_libraries(ctypes.byref(libs)), "cuDNN libraries")
        opt = EngineOptions(threads=0, device=device, force_deterministic_bwd=deterministic_bwd)
        self.handle = ctypes.c_void_p()
        self._check(self.lib.fattn_engine_open(kind.encode(), ctypes.byref(opt),
                                               ctypes.byref(self.handle)), "engine open")
        self.kind = kind
        self.device = "cpu" if kind == "cpu" else "cuda"

    def _check(self, status, what):
        if status != 0:
            msg = self.lib.fattn_last_error()
            raise BridgeError(f"fattn {what}: {msg.decode() if msg else status}")

    def fwd(self, p, device_call=False):
        self._call(self.lib.fattn_engine_fwd, p, "forward", device_call)

    def bwd(self, p, device_call=False):
        self._call(self.lib.fattn_engine_bwd, p, "backward", device_call)

    def _call(self, fn, p, what, device_call):
        # A call on CUDA tensors (context parallelism over NCCL, whose
        # collectives need them) is queued on the engine's own stream
        # (fattn/engine.h): torch's work on the inputs is done first, the
        # engine's before torch reads the outputs.
        if device_call:
            torch.cuda.synchronize()
        self._check(fn(self.handle, ctypes.byref(p)), what)
        if device_call:
            torch.cuda.synchronize()


_engine = None
last_forward = None  # what the last fused_attn_fwd returned, for the forward record
# The generator a forward given rng_gen=None takes, as TE's C++ then takes
# PyTorch's default CUDA generator (attention.cpp:231-236): FusedAttention
# passes None (2.19.0 backends.py:2350, 2.20.2 :2615); fattn-te seeds it per
# case from the spec's rng_seed/rng_offset.
default_gen = None
pending_refusal = None  # TE's C++ refusal of the case running (fattn_te/refusal.py)


class CppRefusal(RuntimeError):
    """What NVTE_ERROR raises in Python: TE's C++ refusing a case."""


def engine():
    global _engine
    if _engine is None:
        _engine = Engine(os.environ.get("FATTN_TE_BACKEND", "cpu"))
    return _engine


def set_engine(e):
    global _engine
    _engine = e


class PhiloxGen:
    """The rng_gen fattn-te passes to FusedAttnFunc: fattn's per-case
    generator model (fattn/rng.h), (seed, offset) that each forward takes as
    rng_state and then advances, as TE's C++ takes philox_cuda_state from
    a torch generator (attention.cpp:231-236)."""

    def __init__(self, seed, offset):
        self.seed = int(seed)
        self.offset = int(offset)


def view(t):
    """A fattn_tensor over a torch tensor (its data, no copy); None -> empty."""
    c = Tensor()
    if t is None:
        return c
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise BridgeError(f"dtype {t.dtype} has no fattn dtype")
    c.data = t.data_ptr() if t.numel() else None
    c.dtype = dt
    c.device = 0 if t.device.type == "cpu" else 1
    c.ndim = t.dim()
    for i in range(t.dim()):
        c.shape[i] = t.shape[i]
        c.strides[i] = t.stride(i)
    return c


_TORCH = {v: k for k, v in _DTYPES.items()}


def poisoned(shape, dtype, device):
    """An output as fattn's front ends allocate it: every byte the poison."""
    t = torch.empty(tuple(shape), dtype=dtype, device=device)
    if t.numel():
        t.view(torch.uint8).fill_(POISON_BYTE)
    return t


def is_float8(t):
    """A TE Float8Tensor / Float8TensorStorage (FP8 data with its scale_inv)."""
    return hasattr(t, "_data") and hasattr(t, "_scale_inv") and hasattr(t, "_fp8_dtype")


def _fmt_has_thd(fmt):
    return int(fmt) == 2  # NVTE_THD


def host_meta(t, keep):
    """What the engine dispatch reads on the host (cu_seqlens, rng_state,
    softmax_offset, page tables; fattn/engine.h) as a host tensor: a CUDA
    one (TE's context-parallel code on a GPU) is copied, the copy kept alive
    in `keep` until the call returns."""
    if t is not None and t.device.type != "cpu":
        t = t.detach().cpu()
        keep.append(t)
    return t


def fused_attn_fwd(max_seqlen_q, max_seqlen_kv, is_training, attn_scale, dropout,
                   fast_zero_fill, qkv_layout, o_format, qkv_scale_inv_format, bias_type,
                   mask_type, softmax_type, window_size, bottom_right_diagonal, cu_seqlens_q,
                   cu_seqlens_kv, q, k, v, fake_dtype, cu_seqlens_q_padded,
                   cu_seqlens_kv_padded, page_table_k, page_table_v, s_quantizer,
                   o_quantizer, attn_bias, softmax_offset, rng_gen, rng_elts_per_thread,
                   return_max_logit, cuda_graph):
    """tex.fused_attn_fwd (TE fused_attn.py:367-400 calls it): returns
    [O, Stats, (Max), rng_state, (Bias), (SoftmaxOffset)]."""
    from . import contract
    contract.check_fwd(max_seqlen_q, max_seqlen_kv, is_training, attn_scale, dropout,
                       fast_zero_fill, qkv_layout, o_format, qkv_scale_inv_format, bias_type,
                       mask_type, softmax_type, window_size, bottom_right_diagonal, cu_seqlens_q,
                       cu_seqlens_kv, q, k, v, fake_dtype, cu_seqlens_q_padded,
                       cu_seqlens_kv_padded, page_table_k, page_table_v, s_quantizer,
                       o_quantizer, attn_bias, softmax_offset, rng_gen, rng_elts_per_thread,
                       return_max_logit, cuda_graph)
    if pending_refusal:
        raise CppRefusal(pending_refusal)
    e = engine()
    if rng_gen is None:
        rng_gen = default_gen
    if not isinstance(rng_gen, PhiloxGen):
        raise BridgeError("rng_gen must be fattn's PhiloxGen or None (the per-case default)")
    # attention.cpp:173-176: O is Q's shape with V's head dim; zeroed for THD.
    oshape = list(q.shape[:-1]) + [v.shape[-1]]
    fp8 = None
    if s_quantizer is not None or o_quantizer is not None or is_float8(q):
        # attention.cpp:136-162: the FP8 call (Float8Tensor Q, K, V; S and
        # O made by their quantizers); fattn_te/bridge_fp8 stands for it.
        from . import bridge_fp8
        out, fp8, out_data = bridge_fp8.fwd_setup(q, k, v, fake_dtype, s_quantizer,
                                                  o_quantizer, oshape)
        q, k, v = (bridge_fp8.data_of(x) for x in (q, k, v))
    else:
        out = out_data = poisoned(oshape, q.dtype, q.device)
        if _fmt_has_thd(o_format):
            out.zero_()
    # attention.cpp:231-236: rng_state = (seed, offset), then the generator
    # advances by rng_elts_per_thread rounded up to a multiple of 4.
    rng_state = torch.tensor([rng_gen.seed, rng_gen.offset], dtype=torch.int64)
    rng_gen.offset += (int(rng_elts_per_thread) + 3) // 4 * 4
    aux = AuxPack()
    p = FwdParams()
    p.q, p.k, p.v = view(q), view(k), view(v)
    p.bias, p.softmax_offset, p.o = view(attn_bias), view(softmax_offset), view(out_data)
    if fp8 is not None:
        p.fp8 = ctypes.cast(ctypes.pointer(fp8.params), ctypes.c_void_p)
    p.aux = ctypes.pointer(aux)
    keep, dev = [], q.device.type != "cpu"
    p.cu_seqlens_q, p.cu_seqlens_kv = (view(host_meta(cu_seqlens_q, keep)),
                                       view(host_meta(cu_seqlens_kv, keep)))
    p.cu_seqlens_q_padded = view(host_meta(cu_seqlens_q_padded, keep))
    p.cu_seqlens_kv_padded = view(host_meta(cu_seqlens_kv_padded, keep))
    p.page_table_k = view(host_meta(page_table_k, keep))
    p.page_table_v = view(host_meta(page_table_v, keep))
    p.softmax_offset = view(host_meta(softmax_offset, keep))
    rng_dev = rng_state.to(q.device)
    p.rng_state = view(rng_state)  # the dispatch reads it on the host
    p.max_seqlen_q, p.max_seqlen_kv = int(max_seqlen_q), int(max_seqlen_kv)
    p.is_training, p.return_max_logit, p.cuda_graph = bool(is_training), bool(
        return_max_logit), False
    p.attn_scale, p.dropout = float(attn_scale), float(dropout)
    p.qkv_layout, p.o_format = int(qkv_layout), int(o_format)
    p.bias_type, p.mask_type, p.softmax_type = int(bias_type), int(mask_type), int(softmax_type)
    p.window_size_left, p.window_size_right = int(window_size[0]), int(window_size[1])
    p.bottom_right_diagonal = bool(bottom_right_diagonal)
    e.fwd(p, dev)  # describes the pack
    if aux.n < 2:
        raise BridgeError(f"engine sized {aux.n} aux entries")
    nstats = 2 if return_max_logit else 1
    owned = []
    for i in range(nstats):
        a = aux.t[i]
        t = poisoned([a.shape[d] for d in range(a.ndim)], _TORCH[a.dtype], q.device)
        owned.append(t)
        aux.t[i] = view(t)
    e.fwd(p, dev)
    if fp8 is not None:
        fp8.after()
    result = [out] + owned + [rng_dev]
    if bias_type in (1, 2):  # the pack's Bias entry is the input (pre/post_scale_bias)
        result.append(attn_bias)
    if softmax_type != 0:
        result.append(softmax_offset)
    if len(result) != 1 + aux.n:
        raise BridgeError(f"engine's pack has {aux.n} entries, the shim {len(result) - 1}")
    global last_forward
    last_forward = list(result)
    return result


def _alloc_packed(like, npack, at, dtype):
    if npack == 1:
        t = poisoned(like.shape, dtype, like.device)
        return [t]
    shape = list(like.shape)
    shape.insert(at, npack)
    buf = poisoned(shape, dtype, like.device)
    return [buf.select(at, m) for m in range(npack)]


def fused_attn_bwd(max_seqlen_q, max_seqlen_kv, attn_scale, dropout, fast_zero_fill,
                   qkv_layout, o_format, do_format, dqkv_layout, qkv_scale_inv_format,
                   do_scale_inv_format, bias_type, mask_type, softmax_type, window_size,
                   bottom_right_diagonal, deterministic, cu_seqlens_q, cu_seqlens_kv, q, k, v,
                   o, d_o, fake_dtype, aux_ctx_tensors, cu_seqlens_q_padded,
                   cu_seqlens_kv_padded, s_quantizer, dp_quantizer, dqkv_quantizer,
                   cuda_graph):
    """tex.fused_attn_bwd (TE fused_attn.py:618-651 calls it): returns
    [dQ, dK, dV, dBias, dSoftmaxOffset], None where absent."""
    e = engine()
    from . import contract, shim
    contract.check_bwd(max_seqlen_q, max_seqlen_kv, attn_scale, dropout, fast_zero_fill,
                       qkv_layout, o_format, do_format, dqkv_layout, qkv_scale_inv_format,
                       do_scale_inv_format, bias_type, mask_type, softmax_type, window_size,
                       bottom_right_diagonal, deterministic, cu_seqlens_q, cu_seqlens_kv, q, k,
                       v, o, d_o, fake_dtype, aux_ctx_tensors, cu_seqlens_q_padded,
                       cu_seqlens_kv_padded, s_quantizer, dp_quantizer, dqkv_quantizer,
                       cuda_graph)
    lay = shim.NVTE_QKV_Layout(int(dqkv_layout)).name[len("NVTE_"):].lower()
    dtype = q.dtype
    fp8 = None
    if s_quantizer is not None or dp_quantizer is not None or is_float8(q):
        # attention.cpp:340-383, 460-465: the FP8 backward (Float8Tensor Q, K,
        # V, dO, O FP8 or not; dQKV made by its quantizer).
        from . import bridge_fp8
        fp8 = bridge_fp8.BwdCall(q, k, v, o, d_o, fake_dtype, s_quantizer, dp_quantizer,
                                 dqkv_quantizer)
        q, k, v, o, d_o = fp8.q, fp8.k, fp8.v, fp8.o, fp8.d_o
        dtype = fp8.grad_dtype
    # attention.cpp:398-452: dQ/dK/dV as views into one buffer per group.
    if "3hd" in lay or "h3d" in lay:
        dq, dk, dv = _alloc_packed(q, 3, q.dim() - 2 if "3hd" in lay else q.dim() - 1, dtype)
    elif "2hd" in lay or "h2d" in lay:
        (dq,) = _alloc_packed(q, 1, 0, dtype)
        dk, dv = _alloc_packed(k, 2, k.dim() - 2 if "2hd" in lay else k.dim() - 1, dtype)
    else:
        (dq,), (dk,), (dv,) = (_alloc_packed(t, 1, 0, dtype) for t in (q, k, v))
    # attention.cpp:492-498: THD grads zero-filled (q's format is the
    # layout's first part, k/v's its last: "t3hd", "thd_t2hd", "thd_bshd_bshd").
    parts = lay.split("_")
    if parts[0].startswith("t"):
        dq.zero_()
    if parts[-1].startswith("t"):
        dk.zero_()
        dv.zero_()
    d_bias = d_off = None
    # attention.cpp:543-559: dBias shaped like the last aux entry, zeroed for THD.
    if int(bias_type) in (1, 2):
        last = aux_ctx_tensors[-1]
        d_bias = poisoned(last.shape, dtype, q.device)
        qkv_name = shim.NVTE_QKV_Layout(int(qkv_layout)).name[len("NVTE_"):].lower()
        if all(part.startswith("t") for part in qkv_name.split("_")):  # the layout's format is THD
            d_bias.zero_()
    # attention.cpp:561-568: dSoftmaxOffset float32 [1, h, 1, 1].
    if int(softmax_type) != 0:
        hdim = 1 if _fmt_has_thd(o_format) else (2 if int(o_format) in (0, 1) else 1)
        d_off = poisoned([1, q.shape[hdim], 1, 1], torch.float32, q.device)
    aux = AuxPack()
    aux.n = len(aux_ctx_tensors)
    keep, dev = [], q.device.type != "cpu"
    last_host = len(aux_ctx_tensors) - 1 if int(softmax_type) != 0 else -1
    for i, t in enumerate(aux_ctx_tensors):
        # [Stats, rng_state, (Bias), (SoftmaxOffset)]: rng_state and the
        # offset are read on the host (fattn/engine.h)
        aux.t[i] = view(host_meta(t, keep) if i in (1, last_host) else t)
    p = BwdParams()
    p.q, p.k, p.v, p.o, p.d_o = view(q), view(k), view(v), view(o), view(d_o)
    p.aux = ctypes.pointer(aux)
    p.dq, p.dk, p.dv, p.d_bias, p.d_softmax_offset = (view(dq), view(dk), view(dv),
                                                      view(d_bias), view(d_off))
    p.cu_seqlens_q, p.cu_seqlens_kv = (view(host_meta(cu_seqlens_q, keep)),
                                       view(host_meta(cu_seqlens_kv, keep)))
    p.cu_seqlens_q_padded = view(host_meta(cu_seqlens_q_padded, keep))
    p.cu_seqlens_kv_padded = view(host_meta(cu_seqlens_kv_padded, keep))
    p.max_seqlen_q, p.max_seqlen_kv = int(max_seqlen_q), int(max_seqlen_kv)
    p.attn_scale, p.dropout = float(attn_scale), float(dropout)
    p.qkv_layout, p.o_format, p.do_format = int(qkv_layout), int(o_format), int(do_format)
    p.dqkv_layout = int(dqkv_layout)
    p.bias_type, p.mask_type, p.softmax_type = int(bias_type), int(mask_type), int(softmax_type)
    p.window_size_left, p.window_size_right = int(window_size[0]), int(window_size[1])
    p.bottom_right_diagonal, p.deterministic = bool(bottom_right_diagonal), bool(deterministic)
    if fp8 is not None:
        p.fp8 = ctypes.cast(ctypes.pointer(fp8.params), ctypes.c_void_p)
    e.bwd(p, dev)
    if fp8 is not None:
        dq, dk, dv = fp8.after(dq, dk, dv)
    return [dq, dk, dv, d_bias, d_off]
