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


class KvCopyArgs(ctypes.Structure):
    """fattn_kv_cache_copy_args (fattn/kv_cache.h), for the shim's
    copy_to_kv_cache (fattn_te/bridge_kv.py)."""
    _fields_ = [(n, ctypes.POINTER(Tensor)) for n in ("new_k", "new_v", "k_cache", "v_cache")] + [
        ("table", ctypes.POINTER(ctypes.c_int32)), ("table_rows", ctypes.c_int64),
        ("cu_new_lens", ctypes.POINTER(ctypes.c_int32)),
        ("cu_cached_lens", ctypes.POINTER(ctypes.c_int32)), ("format", _E)] + [
        (n, ctypes.c_int64) for n in ("b", "max_ctx_len", "max_seq_len", "max_pages_per_seq")] + [
        ("reindex", _B)]


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
        ctypes.sizeof(Fp8Bwd), _off(Fp8Bwd, "amax_dp"), _off(Fp8Bwd, "dp_dtype"),
        ctypes.sizeof(KvCopyArgs), _off(KvCopyArgs, "format"), _off(KvCopyArgs, "reindex")]

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
last_forward_max = None  # whether it was asked for Max (return_max_logit)
# The generator a forward given rng_gen=None takes, as TE's C++ then takes
# PyTorch's default CUDA generator (attention.cpp:231-236): FusedAttention
# passes None (2.19.0 backends.py:2350, 2.20.2 :2615); fattn-te seeds it per
# case from the spec's rng_seed/rng_offset.
default_gen = None
pending_refusal = None  # TE's C++ refusal of the case running (fattn_te/refusal.py)
# The inputs the last fused_attn_fwd was handed that TE's InferenceParams
# makes for a paged case (the cache, its table, the lengths): recorded as
# the case's inputs when TE made them (fattn_te/kvcache.py).
last_inputs = None


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
