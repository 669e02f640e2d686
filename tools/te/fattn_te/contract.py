"""What TE's Python hands the engine, held to the engine's contract before
the call (docs/te.md, "Errors per case"). Every argument TE passes
tex.fused_attn_fwd and tex.fused_attn_bwd (cpp_extensions/fused_attn.py:367
and :618 call them) is checked against the others: the tensors' ranks,
dtypes and shapes against the layout, the batch and head counts, the
cu_seqlens (length, order, bounds) and max lengths against the tensors, the
page tables, the bias and softmax offset, the aux pack backward is given,
the generator and the quantizers. A refactor that saves the wrong tensor,
swaps two lengths or drops an aux entry shows here as the case's result,
naming the object, what TE passed and what the contract expects, rather
than as the engine's argument check (which speaks of fattn's own inputs).
The contract is attention.cpp's (the TE lines lib/legacy/legacy.c cites)
and fused_attn.cpp's reading of the shapes."""
import math

import torch


class HandoffError(Exception):
    """TE passed the engine something inconsistent; a case result, not an
    error of fattn-te."""

    def __init__(self, call, obj, passed, expected):
        self.call, self.obj, self.passed, self.expected = call, obj, passed, expected
        super().__init__(f"TE handed {call} an inconsistent {obj}: passed {passed}; "
                         f"the contract expects {expected}")


_F16 = (torch.float16, torch.bfloat16)


def _dt(d):
    return str(d).replace("torch.", "")


def _shape(t):
    if t is None:
        return "None"
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"{list(t.shape)} {_dt(t.dtype)}"


def _is_float8(t):
    from . import bridge
    return bridge.is_float8(t)


def _quantizer_kind(q):
    return {"Float8Quantizer": "delayed",
            "Float8CurrentScalingQuantizer": "current"}.get(type(q).__name__)


def layout_formats(qkv_layout):
    """(layout name, q format, kv format, paged) of TE's NVTE_QKV_Layout
    value, as get_qkv_format (utils.py) reads a layout's name."""
    from . import tex_enums
    name = tex_enums.NVTE_QKV_Layout(int(qkv_layout)).name[len("NVTE_"):].lower()
    parts = name.replace("paged_kv_", "").split("_")
    fmt = ["".join(ch for ch in p if ch.isalpha()) for p in (parts[0], parts[-1])]
    return name, fmt[0], fmt[1], name.startswith("paged_kv_")


# (batch dim, sequence dim) of a 4-D tensor by format
_DIMS = {"bshd": (0, 1), "sbhd": (1, 0), "bhsd": (0, 2)}
# NVTE_QKV_Format's values (fused_attn.h) of the plain formats
_FMT_VALUE = {"sbhd": 0, "bshd": 1, "thd": 2, "bhsd": 7}
_NOT_SET = 8  # NVTE_QKV_Format_NOT_SET: what the f16 call passes for a scale-inverse layout


class _Call:
    """One call's arguments, checked one object at a time; what is derived
    (batch, heads, lengths) is kept for the objects checked after it."""

    def __init__(self, call):
        self.call = call

    def fail(self, obj, passed, expected):
        raise HandoffError(self.call, obj, passed, expected)

    def tensor(self, name, t, dtypes=None, ndim=None):
        if not isinstance(t, torch.Tensor):
            self.fail(name, _shape(t), "a tensor")
        if ndim is not None and t.dim() != ndim:
            self.fail(name, _shape(t), f"a {ndim}-D tensor")
        if dtypes is not None and t.dtype not in dtypes:
            self.fail(name, _shape(t), " or ".join(_dt(d) for d in dtypes))

    def qkv(self, qkv_layout, q, k, v, fake_dtype, fp8):
        """Q, K, V against the layout: ranks, dtypes, heads, head dims,
        batch; sets self.fmt_q, fmt_kv, paged, b, h, hg, d, dv, s_q, s_kv
        (the tensors' sequence dims, None for THD)."""
        name, self.fmt_q, self.fmt_kv, self.paged = layout_formats(qkv_layout)
        self.layout = name
        for n, t in (("Q", q), ("K", k), ("V", v)):
            self.tensor(n, t)
            if fp8 and not _is_float8(t):
                self.fail(n, _shape(t), "a Float8Tensor (the FP8 call hands quantized Q, K, V)")
            if not fp8 and (_is_float8(t) or t.dtype not in _F16):
                self.fail(n, _shape(t), "float16 or bfloat16 (the f16 call)")
            fmt = self.fmt_q if n == "Q" else self.fmt_kv
            want = 3 if fmt == "thd" else 4
            if t.dim() != want:
                self.fail(n, _shape(t), f"a {want}-D tensor ({fmt} in {name})")
        if k.dtype != q.dtype or v.dtype != q.dtype:
            self.fail("K/V dtype", f"Q {_dt(q.dtype)}, K {_dt(k.dtype)}, V {_dt(v.dtype)}",
                      "one dtype for Q, K and V")
        if fake_dtype != q.dtype:
            self.fail("fake_dtype", _dt(fake_dtype), f"Q's nominal dtype {_dt(q.dtype)}")
        hq = 1 if self.fmt_q == "bhsd" else -2  # the heads' dim
        hk = 1 if self.fmt_kv == "bhsd" else -2
        self.h, self.d = q.shape[hq], q.shape[-1]
        self.hg, self.dv = k.shape[hk], v.shape[-1]
        if v.shape[hk] != self.hg:
            self.fail("V", _shape(v), f"K's {self.hg} heads")
        if k.shape[-1] != self.d:
            self.fail("K", _shape(k), f"Q's head dim {self.d}")
        if self.hg < 1 or self.h % self.hg:
            self.fail("K", _shape(k), f"a head count dividing Q's {self.h}")
        self.s_q = self.s_kv = None
        self.b = None
        if self.fmt_q != "thd":
            bd, sd = _DIMS[self.fmt_q]
            self.b, self.s_q = q.shape[bd], q.shape[sd]
        if self.fmt_kv != "thd":
            bd, sd = _DIMS[self.fmt_kv]
            if self.paged:  # the containers: pages and positions per page
                self.num_pages, self.page_size = k.shape[bd], k.shape[sd]
                if list(v.shape[:2]) != list(k.shape[:2]):
                    self.fail("V", _shape(v), f"K's pages {list(k.shape[:2])}")
            else:
                if list(v.shape[:2]) != list(k.shape[:2]):
                    self.fail("V", _shape(v), f"K's batch and sequence {list(k.shape[:2])}")
                self.s_kv = k.shape[sd]
                if self.b is not None and k.shape[bd] != self.b:
                    self.fail("K", _shape(k), f"Q's batch {self.b}")
                self.b_kv = k.shape[bd]

    def seqlens(self, name, cu, padded_name, padded, t, s, required):
        """cu_seqlens (and their padded form): int32 [b + 1], from 0, never
        decreasing, each length within the sequence dim s (bshd/sbhd) or
        the tokens t (THD). Returns the lengths or None."""
        if cu is None:
            if required:
                self.fail(name, "None", "int32 [b + 1] (a padding mask, THD or a paged cache "
                                        "needs the lengths)")
            return None
        self.tensor(name, cu, (torch.int32,), 1)
        if self.b is None:  # THD q: the batch is the lengths'
            self.b = cu.shape[0] - 1
        if cu.shape[0] != self.b + 1:
            self.fail(name, _shape(cu), f"int32 [{self.b + 1}] (b + 1 for the batch of {self.b})")
        c = [int(x) for x in cu.tolist()]
        lens = [c[i + 1] - c[i] for i in range(self.b)]
        if c[0] != 0 or any(n < 0 for n in lens):
            self.fail(name, str(c), "offsets from 0 that never decrease")
        if s is not None and any(n > s for n in lens):
            self.fail(name, str(c), f"each length at most {s} (the tensors' sequence dim)")
        if t is not None and c[-1] > t:
            self.fail(name, str(c), f"at most {t} tokens (the THD tensor's)")
        if padded is not None:
            self.tensor(padded_name, padded, (torch.int32,), 1)
            p = [int(x) for x in padded.tolist()]
            if len(p) != len(c):
                self.fail(padded_name, _shape(padded), f"int32 [{len(c)}] as {name}")
            # the first slot need not start at 0: TE's context-parallel
            # all_gather hands each step the per-split offsets of the rank's
            # buffer (context_parallel.py 2.20.2:3574-3580), which the engine
            # takes as any slots (fattn/engine.h: tokens from each offset)
            if p[0] < 0 or any(p[i + 1] - p[i] < lens[i] for i in range(self.b)):
                self.fail(padded_name, str(p), f"non-negative offsets leaving room for "
                                               f"{name}'s lengths {lens}")
            if t is not None and p[-1] > t:
                self.fail(padded_name, str(p), f"at most {t} tokens (the THD tensor's)")
        return lens

    def lengths(self, q, k, cu_q, cu_kv, cu_q_pad, cu_kv_pad, max_q, max_kv, mask_type):
        """cu_seqlens and max_seqlen against the tensors (fused_attn.cpp
        takes bshd/sbhd lengths from max_seqlen, THD bounds from it)."""
        padding = int(mask_type) in (1, 3, 5)
        need_q = padding or self.fmt_q == "thd"
        need_kv = padding or self.fmt_kv == "thd" or self.paged
        for n, m in (("max_seqlen_q", max_q), ("max_seqlen_kv", max_kv)):
            if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                self.fail(n, repr(m), "a positive int")
        tq = q.shape[0] if self.fmt_q == "thd" else None
        tkv = k.shape[0] if self.fmt_kv == "thd" else None
        lq = self.seqlens("cu_seqlens_q", cu_q, "cu_seqlens_q_padded", cu_q_pad, tq,
                          self.s_q, need_q)
        skv = self.s_kv if not self.paged else None
        lkv = self.seqlens("cu_seqlens_kv", cu_kv, "cu_seqlens_kv_padded", cu_kv_pad, tkv,
                           skv, need_kv)
        if self.fmt_kv != "thd" and not self.paged and self.b_kv != self.b:
            self.fail("K", _shape(k), f"the batch of {self.b} cu_seqlens_q holds")
        if self.s_q is not None and max_q != self.s_q:
            self.fail("max_seqlen_q", str(max_q), f"{self.s_q} (Q's sequence dim in "
                                                  f"{self.fmt_q})")
        if self.s_kv is not None and max_kv != self.s_kv:
            self.fail("max_seqlen_kv", str(max_kv), f"{self.s_kv} (K's sequence dim in "
                                                    f"{self.fmt_kv})")
        for n, lens, m in (("max_seqlen_q", lq, max_q), ("max_seqlen_kv", lkv, max_kv)):
            if lens and max(lens) > m:
                self.fail(n, str(m), f"at least the longest sequence, {max(lens)}")
        self.max_q, self.max_kv, self.len_kv = max_q, max_kv, lkv

    def pages(self, page_table_k, page_table_v):
        """Page tables: a paged layout has both, int32 [>= b, pages per
        sequence] with pages per sequence = ceil(max_seqlen_kv / page
        size), every entry a sequence's length reaches a page of the
        cache (fused_attn.cpp reads the pages per sequence from the
        table)."""
        for n, pt in (("page_table_k", page_table_k), ("page_table_v", page_table_v)):
            if not self.paged:
                if pt is not None:
                    self.fail(n, _shape(pt), f"None (the layout {self.layout} is not paged)")
                continue
            self.tensor(n, pt, (torch.int32,), 2)
            pps = -(-self.max_kv // self.page_size)
            if pt.shape[0] < self.b or pt.shape[1] != pps:
                self.fail(n, _shape(pt), f"int32 [>= {self.b}, {pps}] (pages per sequence: "
                                         f"max_seqlen_kv {self.max_kv} in pages of "
                                         f"{self.page_size})")
            rows = pt.tolist()
            for i in range(self.b):
                used = -(-self.len_kv[i] // self.page_size)
                bad = [p for p in rows[i][:used] if p < 0 or p >= self.num_pages]
                if bad:
                    self.fail(n, f"row {i}: {rows[i][:used]}",
                              f"pages of the cache's {self.num_pages}")

    def bias(self, name, bias_type, t, nominal):
        """attn_bias (or the pack's Bias entry): present exactly for pre-
        and post-scale bias, Q's dtype, [1|b, 1|h, 1|max_seqlen_q,
        max_seqlen_kv]."""
        if int(bias_type) not in (1, 2):
            if t is not None:
                self.fail(name, _shape(t), "None (the bias type has no tensor)")
            return
        self.tensor(name, t, (nominal,), 4)
        s = list(t.shape)
        if (s[0] not in (1, self.b) or s[1] not in (1, self.h)
                or s[2] not in (1, self.max_q) or s[3] != self.max_kv):
            self.fail(name, _shape(t), f"[1|{self.b}, 1|{self.h}, 1|{self.max_q}, "
                                       f"{self.max_kv}]")

    def offset(self, name, softmax_type, t):
        if int(softmax_type) == 0:
            if t is not None:
                self.fail(name, _shape(t), "None (vanilla softmax has no offset)")
            return
        self.tensor(name, t, (torch.float32,), 4)
        if list(t.shape) != [1, self.h, 1, 1]:
            self.fail(name, _shape(t), f"float32 [1, {self.h}, 1, 1]")

    def scalars(self, attn_scale, dropout, window_size):
        if isinstance(attn_scale, bool) or not isinstance(attn_scale, (int, float)) or not (
                math.isfinite(attn_scale) and attn_scale > 0):
            self.fail("attn_scale", repr(attn_scale), "a positive finite float")
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            self.fail("dropout", repr(dropout), "a probability in [0, 1)")
        w = list(window_size) if isinstance(window_size, (tuple, list)) else None
        if (w is None or len(w) != 2 or any(isinstance(x, bool) or not isinstance(x, int)
                                            or x < -1 for x in w)):
            self.fail("window_size", repr(window_size), "two ints, each -1 or more")

    def fmt(self, name, value):
        want = _FMT_VALUE.get(self.fmt_q)
        if want is not None and int(value) != want:
            self.fail(name, str(int(value)), f"{want} (Q's format {self.fmt_q})")

    def quantizers(self, fp8, named, fp8_kinds):
        """The f16 call has none; the FP8 call has each of its quantizers,
        of the kind the kernel reads (a scale only a Float8Quantizer
        holds)."""
        for n, qz in named:
            if not fp8:
                if qz is not None:
                    self.fail(n, type(qz).__name__, "None (the f16 call)")
                continue
            k = _quantizer_kind(qz) if qz is not None else None
            if k not in fp8_kinds[n]:
                self.fail(n, type(qz).__name__ if qz is not None else "None",
                          " or ".join({"delayed": "a Float8Quantizer",
                                       "current": "a Float8CurrentScalingQuantizer"}[x]
                                      for x in fp8_kinds[n])
                          + " (the FP8 kernel reads its scale)" * (fp8_kinds[n] == ("delayed",)))


def check_fwd(max_seqlen_q, max_seqlen_kv, is_training, attn_scale, dropout, fast_zero_fill,
              qkv_layout, o_format, qkv_scale_inv_format, bias_type, mask_type, softmax_type,
              window_size, bottom_right_diagonal, cu_seqlens_q, cu_seqlens_kv, q, k, v,
              fake_dtype, cu_seqlens_q_padded, cu_seqlens_kv_padded, page_table_k,
              page_table_v, s_quantizer, o_quantizer, attn_bias, softmax_offset, rng_gen,
              rng_elts_per_thread, return_max_logit, cuda_graph):
    """tex.fused_attn_fwd's arguments (attention.cpp's fused_attn_fwd)."""
    from . import bridge
    c = _Call("fused_attn_fwd")
    fp8 = _is_float8(q) or s_quantizer is not None or o_quantizer is not None
    c.qkv(qkv_layout, q, k, v, fake_dtype, fp8)
    c.lengths(q, k, cu_seqlens_q, cu_seqlens_kv, cu_seqlens_q_padded, cu_seqlens_kv_padded,
              max_seqlen_q, max_seqlen_kv, mask_type)
    c.pages(page_table_k, page_table_v)
    c.bias("attn_bias", bias_type, attn_bias, q.dtype)
    c.offset("softmax_offset", softmax_type, softmax_offset)
    c.scalars(attn_scale, dropout, window_size)
    c.fmt("o_format", o_format)
    if qkv_scale_inv_format is not None and int(qkv_scale_inv_format) != _NOT_SET:
        c.fail("qkv_scale_inv_format", repr(qkv_scale_inv_format),
               "None or NOT_SET (per-tensor scaling has no scale-inverse layout)")
    c.quantizers(fp8, (("S quantizer", s_quantizer), ("O quantizer", o_quantizer)),
                 {"S quantizer": ("delayed",), "O quantizer": ("delayed", "current")})
    for n, x in (("is_training", is_training), ("return_max_logit", return_max_logit),
                 ("fast_zero_fill", fast_zero_fill)):
        if not isinstance(x, bool):
            c.fail(n, repr(x), "a bool")
    if fp8 and return_max_logit:
        c.fail("return_max_logit", "True", "False on the FP8 call (its kernel has no Max)")
    if rng_gen is not None and not isinstance(rng_gen, bridge.PhiloxGen):
        c.fail("rng_gen", type(rng_gen).__name__,
               "None or a generator (fattn's PhiloxGen stands for torch's)")
    if isinstance(rng_elts_per_thread, bool) or not isinstance(rng_elts_per_thread, int) or (
            rng_elts_per_thread < 0):
        c.fail("rng_elts_per_thread", repr(rng_elts_per_thread), "an int, 0 or more")


def check_bwd(max_seqlen_q, max_seqlen_kv, attn_scale, dropout, fast_zero_fill, qkv_layout,
              o_format, do_format, dqkv_layout, qkv_scale_inv_format, do_scale_inv_format,
              bias_type, mask_type, softmax_type, window_size, bottom_right_diagonal,
              deterministic, cu_seqlens_q, cu_seqlens_kv, q, k, v, o, d_o, fake_dtype,
              aux_ctx_tensors, cu_seqlens_q_padded, cu_seqlens_kv_padded, s_quantizer,
              dp_quantizer, dqkv_quantizer, cuda_graph):
    """tex.fused_attn_bwd's arguments: the forward's (as above, no page
    tables: fused_attn_bwd takes none), O and dO Q's shape with V's head
    dim (attention.cpp:173-176 made O so), the aux pack [Stats, rng_state,
    (Bias), (SoftmaxOffset)] as fused_attn_fwd returned it (:231-290)."""
    c = _Call("fused_attn_bwd")
    fp8 = (_is_float8(q) or s_quantizer is not None or dp_quantizer is not None
           or dqkv_quantizer is not None)
    c.qkv(qkv_layout, q, k, v, fake_dtype, fp8)
    if c.paged:
        c.fail("qkv_layout", c.layout, "a layout without a paged cache (no backward for it)")
    c.lengths(q, k, cu_seqlens_q, cu_seqlens_kv, cu_seqlens_q_padded, cu_seqlens_kv_padded,
              max_seqlen_q, max_seqlen_kv, mask_type)
    want = list(q.shape[:-1]) + [v.shape[-1]]
    for name, t in (("O (the out saved in forward)", o), ("dO (the out's gradient)", d_o)):
        if not isinstance(t, torch.Tensor) or list(t.shape) != want or (
                not _is_float8(t) and t.dtype != q.dtype):
            c.fail(name, _shape(t), f"{want} {_dt(q.dtype)} (Q's shape with V's head dim)")
    if fp8 and not _is_float8(d_o):
        c.fail("dO (the out's gradient)", _shape(d_o), "a Float8Tensor (the FP8 backward)")
    c.fmt("o_format", o_format)
    c.fmt("do_format", do_format)
    if int(dqkv_layout) != int(qkv_layout):
        c.fail("dqkv_layout", str(int(dqkv_layout)), f"{int(qkv_layout)} (qkv_layout: "
                                                     f"per-tensor grads keep Q, K, V's layout)")
    for n, x in (("qkv_scale_inv_format", qkv_scale_inv_format),
                 ("do_scale_inv_format", do_scale_inv_format)):
        if x is not None and int(x) != _NOT_SET:
            c.fail(n, repr(x), "None or NOT_SET (per-tensor scaling has no scale-inverse "
                               "layout)")
    c.scalars(attn_scale, dropout, window_size)
    c.quantizers(fp8, (("S quantizer", s_quantizer), ("dP quantizer", dp_quantizer),
                       ("dQKV quantizer", dqkv_quantizer)),
                 {"S quantizer": ("delayed",), "dP quantizer": ("delayed",),
                  "dQKV quantizer": ("delayed", "current")})
    has_bias, has_off = int(bias_type) in (1, 2), int(softmax_type) != 0
    aux = list(aux_ctx_tensors) if isinstance(aux_ctx_tensors, (list, tuple)) else None
    n = 2 + has_bias + has_off
    expected = (f"{n}: Stats, rng_state" + (", Bias" if has_bias else "")
                + (", SoftmaxOffset" if has_off else ""))
    if aux is None:
        c.fail("aux_ctx_tensors", type(aux_ctx_tensors).__name__, expected)
    got = [_shape(t) for t in aux]
    if len(aux) != n:
        c.fail("aux_ctx_tensors", f"{len(aux)} entries {got}", expected)
    if c.fmt_q == "thd":
        stats = [q.shape[0], c.h, 1]
    else:
        stats = [c.b, c.h, max_seqlen_q, 1]
    if (not isinstance(aux[0], torch.Tensor) or aux[0].dtype != torch.float32
            or list(aux[0].shape) != stats):
        c.fail("aux_ctx_tensors[0] (Stats)", got[0], f"float32 {stats}")
    if (not isinstance(aux[1], torch.Tensor) or aux[1].dtype != torch.int64
            or aux[1].numel() != 2):
        c.fail("aux_ctx_tensors[1] (rng_state)", got[1], "int64 [2] (seed, offset)")
    i = 2
    if has_bias:
        c.bias(f"aux_ctx_tensors[{i}] (Bias)", bias_type, aux[i], q.dtype)
        i += 1
    if has_off:
        c.offset(f"aux_ctx_tensors[{i}] (SoftmaxOffset)", softmax_type, aux[i])
