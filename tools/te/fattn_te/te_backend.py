"""nvte_get_fused_attn_backend as TE's C++ has it (fused_attn.cpp, release_v2.19
= main d0067d0, lines 232-545), for one platform (sm, cuDNN version), so that
TE's own Python backend selection (get_attention_backend, utils.py) runs on
the CPU through fattn's shim (tools/te/te-tests, docs/te.md "TE's tests as a
matrix"). A transcription of its own, line for line: not fattn's support
table, whose rows it must be able to contradict. Every clause keeps its
cuDNN and architecture conditions, so another platform is one argument."""

# NVTE_Fused_Attn_Backend
NO_BACKEND, F16_ARBITRARY_SEQLEN, FP8 = -1, 1, 2

_SBHD, _BSHD, _THD, _BSHD_2SBHD, _SBHD_2BSHD, _THD_2BSHD, _THD_2SBHD, _BHSD = (
    "sbhd", "bshd", "thd", "bshd_2sbhd", "sbhd_2bshd", "thd_2bshd", "thd_2sbhd", "bhsd")

# nvte_get_qkv_format (fused_attn.cpp:128-166), by layout name
_QKV_FORMAT = {
    "SB3HD": _SBHD, "SBH3D": _SBHD, "SBHD_SB2HD": _SBHD, "SBHD_SBH2D": _SBHD,
    "SBHD_SBHD_SBHD": _SBHD, "Paged_KV_SBHD_SBHD_SBHD": _SBHD,
    "BS3HD": _BSHD, "BSH3D": _BSHD, "BSHD_BS2HD": _BSHD, "BSHD_BSH2D": _BSHD,
    "BSHD_BSHD_BSHD": _BSHD, "Paged_KV_BSHD_BSHD_BSHD": _BSHD,
    "T3HD": _THD, "TH3D": _THD, "THD_T2HD": _THD, "THD_TH2D": _THD, "THD_THD_THD": _THD,
    "SBHD_BSHD_BSHD": _SBHD_2BSHD, "Paged_KV_SBHD_BSHD_BSHD": _SBHD_2BSHD,
    "BSHD_SBHD_SBHD": _BSHD_2SBHD, "Paged_KV_BSHD_SBHD_SBHD": _BSHD_2SBHD,
    "THD_BSHD_BSHD": _THD_2BSHD, "Paged_KV_THD_BSHD_BSHD": _THD_2BSHD,
    "THD_SBHD_SBHD": _THD_2SBHD, "Paged_KV_THD_SBHD_SBHD": _THD_2SBHD,
    "BHSD_BHSD_BHSD": _BHSD,
}
# nvte_get_q_format / nvte_get_kv_format (:168-217)
_Q_FORMAT = {_SBHD: _SBHD, _SBHD_2BSHD: _SBHD, _BSHD: _BSHD, _BSHD_2SBHD: _BSHD,
             _THD: _THD, _THD_2BSHD: _THD, _THD_2SBHD: _THD, _BHSD: _BHSD}
_KV_FORMAT = {_SBHD: _SBHD, _BSHD_2SBHD: _SBHD, _THD_2SBHD: _SBHD, _BSHD: _BSHD,
              _SBHD_2BSHD: _BSHD, _THD_2BSHD: _BSHD, _THD: _THD, _BHSD: _BHSD}


def layout_group(name):
    """nvte_get_qkv_layout_group (:94-126)."""
    if name.startswith("Paged_KV_"):
        return "paged_kv_hd_hd_hd"
    if name == "BHSD_BHSD_BHSD":
        return "sd_sd_sd"
    if name in ("SB3HD", "BS3HD", "T3HD"):
        return "3hd"
    if name in ("SBH3D", "BSH3D", "TH3D"):
        return "h3d"
    if name in ("SBHD_SB2HD", "BSHD_BS2HD", "THD_T2HD"):
        return "hd_2hd"
    if name in ("SBHD_SBH2D", "BSHD_BSH2D", "THD_TH2D"):
        return "hd_h2d"
    return "hd_hd_hd"


def _needs_int64_offsets(group, h, hg, sq, skv, dqk, dv):
    """fused_attn::get_ragged_offset_dtype (utils.cu:475-508) is kInt64."""
    if group in ("3hd", "h3d"):
        o = [3 * h * dqk * sq] * 3
    elif group in ("hd_2hd", "hd_h2d"):
        o = [h * dqk * sq, 2 * hg * dqk * skv, 2 * hg * dqk * skv]
    elif group in ("hd_hd_hd", "paged_kv_hd_hd_hd"):
        o = [h * dqk * sq, hg * dqk * skv, hg * dv * skv]
    else:
        o = [0, 0, 0]
    return max(o + [h * dqk * sq]) > 2**31 - 1


def fused_attn_backend(is_training, q_dtype, kv_dtype, layout, bias, mask, softmax, dropout,
                       h, hg, sq, skv, dqk, dv, wl, wr, return_max_logit, cuda_graph,
                       deterministic, sm=90, cudnn=91900):
    """The backend; dtypes as "fp16", "bf16", "fp8e4m3", "fp8e5m2" (others: any other
    string), layout as TE's layout name (SBHD_SBHD_SBHD), bias, mask and softmax
    as TE's names (no_bias, causal_bottom_right, off-by-one)."""
    assert q_dtype == kv_dtype, "Q and KV must have the same data type."
    fmt = _QKV_FORMAT[layout]
    q_fmt, kv_fmt = _Q_FORMAT[fmt], _KV_FORMAT[fmt]
    is_thd_layout = _THD in (q_fmt, kv_fmt)
    group = layout_group(layout)
    int64_offsets = fmt == _THD and _needs_int64_offsets(group, h, hg, sq, skv, dqk, dv)
    ragged_ok = not int64_offsets or cudnn >= 90500
    if q_dtype in ("fp8e4m3", "fp8e5m2"):
        return FP8 if _fp8(is_training, fmt, bias, mask, softmax, sq, skv, dqk, dv,
                           int64_offsets, return_max_logit, sm, cudnn) else NO_BACKEND
    if q_dtype not in ("fp16", "bf16"):
        return NO_BACKEND
    args = dict(is_training=is_training, layout=layout, fmt=fmt, q_fmt=q_fmt, kv_fmt=kv_fmt,
                is_thd_layout=is_thd_layout, group=group, bias=bias, mask=mask,
                softmax=softmax, dropout=dropout, h=h, hg=hg, sq=sq, skv=skv, dqk=dqk, dv=dv,
                wl=wl, wr=wr, sm=sm, cudnn=cudnn)
    ok = (_f16_arch_seqlen_heads(**args) and _f16_head_dim(**args) and _f16_bias(**args)
          and _f16_mask(**args) and _f16_bias_mask(**args) and _f16_format(**args)
          and _f16_window(**args) and ragged_ok and cudnn not in (91000, 91001)
          and (cudnn >= 91301 or softmax == "vanilla")
          and (not return_max_logit or cudnn >= 92100)
          and (sm < 100 or not is_training
               or (not deterministic and (dropout == 0.0 or bias == "no_bias"))
               or (deterministic and cudnn >= 91801 and dropout == 0.0 and bias == "no_bias")))
    backend = F16_ARBITRARY_SEQLEN if ok else NO_BACKEND
    if cudnn < 8900:
        backend = NO_BACKEND
    if cudnn == 91400 and skv > 1024 and wl != -1 and mask not in ("causal",
                                                                   "causal_bottom_right"):
        backend = NO_BACKEND
    if (cudnn <= 91500 and is_training and fmt in (_BSHD, _SBHD) and skv % 128 != 0
            and cuda_graph and "padding" not in mask):
        backend = NO_BACKEND
    if backend == F16_ARBITRARY_SEQLEN and sm == 120:
        if cudnn < 91801 or (deterministic and is_training) or layout in ("T3HD", "TH3D"):
            backend = NO_BACKEND
    return backend


def _fp8(is_training, fmt, bias, mask, softmax, sq, skv, dqk, dv, int64_offsets,
         return_max_logit, sm, cudnn):
    """The FP8 backend's clause (:257-295)."""
    if not (sm >= 90 and bias == "no_bias"):
        return False
    c921 = (cudnn >= 92100 and sm >= 100 and dqk <= 192 and dv <= 128 and dqk % 16 == 0
            and dv % 16 == 0 and mask in ("no_mask", "causal", "causal_bottom_right"))
    c921 = c921 or (cudnn >= 90201 and sm < 100 and sq % 128 == 0 and skv % 128 == 0
                    and dqk == 128 and dv == 128 and mask in ("causal", "no_mask"))
    dims97 = ((sm < 100 and not is_training and dqk <= 256 and dv <= 256)
              or (sm < 100 and is_training and dqk == 128 and dv == 128)
              or (sm >= 100 and dqk <= 128 and dv <= 128))
    c97 = (cudnn >= 90700 and dims97 and dqk % 16 == 0 and dv % 16 == 0
           and mask in ("no_mask", "causal", "padding", "padding_causal"))
    fmt_ok = ((cudnn < 92100 and fmt in (_BSHD, _SBHD) and softmax == "vanilla")
              or (cudnn >= 92100 and fmt in (_BSHD, _SBHD, _BHSD)))
    return ((c921 or c97) and fmt_ok and not int64_offsets and cudnn != 91000
            and not return_max_logit)


def _f16_arch_seqlen_heads(sm, cudnn, sq, skv, h, hg, **_):
    """Architecture, sequence length and heads (:301-309)."""
    arch = ((cudnn < 8903 and sm in (80, 90)) or (cudnn >= 8903 and 80 <= sm < 100)
            or (cudnn >= 90700 and sm >= 100))
    seq = (cudnn < 90000 and sq % 64 == 0 and skv % 64 == 0) or cudnn >= 90000
    heads = (cudnn < 8907 and h == hg) or cudnn >= 8907
    return arch and seq and heads


def _f16_head_dim(is_training, sm, cudnn, dqk, dv, sq, mask, group, is_thd_layout, bias,
                  dropout, softmax, wl, wr, **_):
    """Head dimension (:310-353)."""
    if dqk % 8 or dv % 8:
        return False
    paged = group == "paged_kv_hd_hd_hd"
    ok = (dqk <= 128 and dv <= 128)
    ok = ok or (dqk <= 256 and dv <= 256
                and ((not is_training and sm == 90 and cudnn >= 90100)
                     or (is_training and sm == 90 and cudnn >= 90500)))
    ok = ok or (not is_training and sm >= 100 and cudnn >= 90900 and sq > 1 and not paged)
    ok = ok or (not is_training and cudnn >= 91002
                and (paged or sq > 1
                     or (sq == 1 and mask not in ("causal", "padding_causal"))))
    ok = ok or (dqk == 192 and dv == 128 and is_training and sm >= 100 and cudnn >= 91100)
    causal = mask in ("causal", "padding_causal", "causal_bottom_right",
                      "padding_causal_bottom_right")
    ok = ok or (dqk == 256 and dv == 256 and is_training and 100 <= sm < 110
                and cudnn >= (92500 if is_thd_layout else 92300) and not paged
                and bias == "no_bias" and dropout == 0.0 and softmax == "vanilla"
                and ((wl == -1 and wr == -1) or (causal and wr in (-1, 0))))
    bug911 = (cudnn >= 91100 and is_training and sm == 90 and dqk >= 128 and dv >= 128
              and not (dqk == 192 and dv == 128) and dqk != dv)
    return ok and not bug911


def _f16_bias(cudnn, bias, mask, sm, **_):
    """Bias type (:354-367)."""
    if cudnn < 8906:
        return bias == "no_bias"
    if bias == "no_bias":
        return True
    if bias == "alibi":
        return mask not in ("no_mask", "padding", "padding_causal",
                            "padding_causal_bottom_right") and sm >= 90
    if bias == "post_scale_bias":
        return sm >= 90 or (cudnn >= 90000 and sm >= 80)
    return False


def _f16_mask(cudnn, fmt, mask, sq, skv, bias, dropout, group, **_):
    """Mask type (:368-413)."""
    bshd_sbhd = fmt in (_SBHD, _BSHD)
    nobias_nodrop = bias == "no_bias" and dropout == 0.0
    return ((cudnn < 8906 and mask == "causal")
            or (cudnn >= 8906 and bshd_sbhd
                and mask in ("causal", "padding", "padding_causal", "no_mask"))
            or (cudnn >= 90100 and fmt == _THD and mask in ("padding", "padding_causal"))
            or (cudnn >= 90300 and bshd_sbhd and mask == "causal_bottom_right"
                and sq % 64 == 0 and skv % 64 == 0 and sq <= skv and nobias_nodrop)
            or (cudnn >= 90500 and group == "paged_kv_hd_hd_hd"
                and (mask in ("padding", "padding_causal")
                     or (mask == "padding_causal_bottom_right" and sq % 64 == 0
                         and skv % 64 == 0 and sq <= skv))
                and nobias_nodrop)
            or (cudnn >= 90600 and mask == "padding_causal_bottom_right" and sq % 64 == 0
                and skv % 64 == 0 and sq <= skv and nobias_nodrop)
            or (cudnn >= 90700
                and (mask in ("no_mask", "causal")
                     or (mask in ("padding", "padding_causal", "padding_causal_bottom_right")
                         and nobias_nodrop)
                     or (mask in ("causal_bottom_right", "padding_causal_bottom_right")
                         and sq <= skv))))


def _f16_bias_mask(cudnn, mask, bias, **_):
    """Bias + mask combination (:414-418)."""
    return not (cudnn >= 8906 and mask in ("padding", "padding_causal")
                and bias == "post_scale_bias")


def _f16_format(fmt, q_fmt, kv_fmt, sm, cudnn, h, hg, **_):
    """QKV format (:419-431)."""
    plain = (_SBHD, _BSHD, _BHSD)
    return (fmt in plain
            or (fmt == _THD and sm >= 90
                and ((cudnn >= 90100 and h == hg) or cudnn >= 90600))
            or ((q_fmt in plain or (q_fmt == _THD and sm >= 90) or kv_fmt in plain
                 or (kv_fmt == _THD and sm >= 90)) and cudnn >= 90700))


def _f16_window(cudnn, wl, wr, mask, sq, skv, dropout, bias, fmt, sm, **_):
    """Sliding window (:432-466)."""
    if cudnn < 90200:
        return wl == -1 and wr in (-1, 0)
    nobias_nodrop = bias == "no_bias" and dropout == 0.0
    b92 = ((wl == -1 and wr == -1 and mask == "no_mask")
           or (wl >= -1 and wr == 0
               and (mask in ("no_mask", "causal")
                    or (mask == "causal_bottom_right" and sq == skv))
               and sq <= skv and nobias_nodrop and fmt in (_BSHD, _SBHD)))
    if b92:
        return True
    if cudnn < 90600:
        return False
    brcm_ok = sm < 100 or (sq == skv and cudnn <= 90700) or cudnn > 90700
    return ((wl == -1 and wr in (-1, 0))
            or (wl >= -1 and wr >= -1
                and ((mask == "causal_bottom_right" and brcm_ok)
                     or mask in ("no_mask", "padding", "padding_causal")
                     or (mask == "padding_causal_bottom_right" and brcm_ok))
                and sq <= skv and nobias_nodrop))
