"""What TE's context-parallel code needs of CUDA and of NCCL beyond the C++
extension, stood in for on the host so that it runs with the gloo backend
in local processes (docs/te.md, "Context parallelism"). Applied in a rank
worker only, after TE is imported, on the CPU engine only.

Each entry of STANDINS names what it replaces and the TE lines (2.19.0 /
2.20.2; `cp.py` = attention/dot_product_attention/context_parallel.py) that
reach it. On a GPU runner none of them is applied: NCCL and CUDA streams
run as TE expects them (tools/te/gpu-te.sh --cp N)."""
import contextlib
import os

import torch

# (name, what stands in, the TE lines that reach it)
STANDINS = [
    ("NVTE_TORCH_COMPILE=0",
     "TE's jit_fuser is torch.compile otherwise; the correction helpers run eagerly",
     "pytorch/jit.py:40-42 (both); cp.py:154-210 @jit_fuser"),
    ("torch.cuda.Stream, torch.cuda.current_stream, torch.cuda.stream",
     "no-op streams (wait_stream, wait_event, record_event, synchronize, query) and a null "
     "stream context: on the host, program order is one valid serialisation of TE's two "
     "streams",
     "cp.py 2.19.0:569,642,674,713,720,1920,1942,2162,2213,3499,3513,3629,3638,3843,3864,3867,"
     "4116,4147,4208,4456,4501 / 2.20.2:558,631,663,702,709,1906,1927,2147,2247,3484,3498,3614,"
     "3623,3828,3849,3852,4102,4133,4194,4442,4487; the caller's cp_stream"),
    ("torch.cuda.Event", "a no-op event (record, wait, synchronize, query)",
     "cp.py 2.19.0:1922,2160,2211,4118,4469-4499 / 2.20.2:1908,2145,2245,4104,4455-4485"),
    ("torch.cuda.current_device",
     "the host: reduce_scatter_along_first_dim allocates its output there",
     "distributed.py 2.19.0:954 / 2.20.2:968, from cp.py 2.19.0:4512-4528 / 2.20.2:4498-4514 "
     "(all_gather backward)"),
    ("torch.distributed.batch_isend_irecv",
     "TE's own call, its requests' wait() made idempotent: gloo blocks forever on a second "
     "wait() of a completed send/recv request (NCCL treats it as a no-op), which TE's P2P "
     "backward makes; NVTE_BATCH_MHA_P2P_COMM=1 sends every exchange through it (isend/irecv "
     "themselves cannot be wrapped: P2POp checks the op's identity)",
     "cp.py 2.19.0:137,1652,2476,2714,2971 / 2.20.2:137,1642,2459,2697,2954"),
    ("torch.cuda.is_available, the 'cuda' device (FP8 cases: fattn_te/cp_fp8.py, while the "
     "rank's DotProductAttention is constructed and its init_fp8_metadata runs)",
     "true while the module is constructed (schedule.on_host), and TE's recipe states' "
     "default device the host (kvcache.host): the rank's FP8 state lives where its tensors do",
     "module/base.py:895 (both); quantization.py:1435,1484 (both: DelayedScalingRecipeState, "
     "Float8CurrentScalingRecipeState allocate on torch.device('cuda') when given no device)"),
]


class _Stream:
    """A CUDA stream on the host: every operation is already ordered."""

    def wait_stream(self, other):
        return None

    def wait_event(self, event):
        return None

    def record_event(self, event=None):
        return event if event is not None else _Event()

    def synchronize(self):
        return None

    def query(self):
        return True


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        return None

    def wait(self, stream=None):
        return None

    def synchronize(self):
        return None

    def query(self):
        return True


_CURRENT = _Stream()


def _current_stream(device=None):
    return _CURRENT


def _stream_context(stream):
    return contextlib.nullcontext()


class _OnceWaited:
    """A gloo Work whose wait() may be called again once it completed."""

    def __init__(self, work):
        self._work = work
        self._done = False

    def wait(self, *args, **kwargs):
        if not self._done:
            self._work.wait(*args, **kwargs)
            self._done = True
        return True

    def is_completed(self):
        return self._done or self._work.is_completed()

    def __getattr__(self, name):
        return getattr(self._work, name)


APPLIED = []


def environment():
    """The environment a rank worker sets before TE is imported."""
    os.environ["NVTE_TORCH_COMPILE"] = "0"
    os.environ["NVTE_BATCH_MHA_P2P_COMM"] = "1"


def apply():
    """Install the stand-ins (idempotent)."""
    if APPLIED:
        return
    torch.cuda.Stream = _Stream
    torch.cuda.Event = _Event
    torch.cuda.current_stream = _current_stream
    torch.cuda.stream = _stream_context
    torch.cuda.current_device = lambda: torch.device("cpu")
    dist = torch.distributed
    orig = dist.batch_isend_irecv

    def batch_isend_irecv(ops):
        return [_OnceWaited(w) for w in orig(ops)]

    dist.batch_isend_irecv = batch_isend_irecv
    APPLIED.extend(name for name, _, _ in STANDINS)


def cp_stream():
    """The cp_stream a rank hands FusedAttention (TE's test makes a
    torch.cuda.Stream())."""
    return _Stream()
