"""What TE's Python hands the engine, held to the engine's contract before
the call (docs/te.md, "Inconsistent hand-offs"). TE's fused_attn_bwd is
given tensors TE saved in forward; a refactor that saves the wrong tensor
or drops an aux entry shows here as the case's result, naming the object,
what TE passed and what the contract expects, rather than as the engine's
argument check (which speaks of fattn's own inputs)."""
import torch


class HandoffError(Exception):
    """TE passed the engine something inconsistent; a case result, not an
    error of fattn-te."""

    def __init__(self, call, obj, passed, expected):
        self.call, self.obj, self.passed, self.expected = call, obj, passed, expected
        super().__init__(f"TE handed {call} an inconsistent {obj}: passed {passed}; "
                         f"the contract expects {expected}")


def _shape(t):
    return "None" if t is None else f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}"


def check_bwd(bias_type, softmax_type, q, k, v, o, d_o, aux):
    """tex.fused_attn_bwd's inputs (cpp_extensions/fused_attn.py:618 calls
    it): O and dO are Q's shape with V's head dim in Q's dtype (attention.cpp
    :173-176 made O so), and the aux pack is [Stats, rng_state, (Bias),
    (SoftmaxOffset)] as fused_attn_fwd returned it (:231-290)."""
    call = "fused_attn_bwd"
    want = list(q.shape[:-1]) + [v.shape[-1]]
    for name, t in (("O (the out saved in forward)", o), ("dO (the out's gradient)", d_o)):
        # the dtype only between plain f16/bf16 tensors: an FP8 path hands
        # quantized tensors whose dtype is their own
        f16 = (torch.float16, torch.bfloat16)
        if (t is None or list(t.shape) != want
                or (t.dtype in f16 and q.dtype in f16 and t.dtype != q.dtype)):
            raise HandoffError(call, name, _shape(t),
                               f"{want} {str(q.dtype).replace('torch.', '')} "
                               f"(Q's shape with V's head dim)")
    n = 2 + (int(bias_type) in (1, 2)) + (int(softmax_type) != 0)
    got = [_shape(t) for t in aux]
    if len(aux) != n:
        raise HandoffError(call, "aux_ctx_tensors", f"{len(aux)} entries {got}",
                           f"{n}: Stats, rng_state" + (", Bias" if int(bias_type) in (1, 2) else "")
                           + (", SoftmaxOffset" if int(softmax_type) != 0 else ""))
    if aux[0] is None or aux[0].dtype != torch.float32:
        raise HandoffError(call, "aux_ctx_tensors[0] (Stats)", got[0], "a float32 tensor")
    if aux[1] is None or aux[1].dtype != torch.int64 or aux[1].numel() != 2:
        raise HandoffError(call, "aux_ctx_tensors[1] (rng_state)", got[1],
                           "int64 [2] (seed, offset)")
