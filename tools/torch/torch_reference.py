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
the tests run without it); and a fattn build (--fattn, else $FATTN, else
build*/harness/fattn of this tree): specs are resolved by `fattn cases
--resolved --json` and the output is written by `fattn write-tree`, through
tools/python/fattn_runfile.py (docs/torch.md).
"""
import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# tools/python/fattn_runfile.py: run files and resolved specs, shared by the tools
for _d in (os.path.join(HERE, "python"), os.path.join(os.path.dirname(HERE), "python")):
    if os.path.isfile(os.path.join(_d, "fattn_runfile.py")) and _d not in sys.path:
        sys.path.insert(0, _d)
import fattn_runfile as fr  # noqa: E402

SCHEMA = fr.SCHEMA
InputError = fr.InputError  # a bad input (exit 2); names the file, case and cause
digest = fr.digest
atomic_write_text = fr.atomic_write_text
_attr_value, _set_attr, _del_attr = fr.attr_value, fr.set_attr, fr.del_attr
_ROOT = fr.source_root()
DEFAULT_SPEC = os.path.join(_ROOT, "golden", "default_cases.json") if _ROOT else None


# --------------------------------------------------------------------------
# Case specs, as fattn resolves them (fattn cases --resolved --json)
# --------------------------------------------------------------------------

def read_cases(path, fattn=None):
    """A case-spec file as (case object as written, fattn's resolved model)
    pairs, in file order. fattn's spec parser decides what is valid: a file
    it refuses is an InputError with its message (file, case, key)."""
    resolved = {r["id"]: r for r in fr.resolved_cases(path, fattn)}
    with open(path, encoding="utf-8") as f:  # fattn read it: it is a JSON array
        cases = json.load(f)
    return [(c, resolved[c["id"]]) for c in cases]


class Verdict:
    """Whether PyTorch can express a case: forward, and backward separately.

    forward: bool; backward: True/False, or None for an inference case;
    reasons: why the forward is not expressible (empty when it is);
    backward_reason: why the backward is not, when the forward is.
    is_causal, gqa: the SDPA arguments for an expressible case.
    """

    def __init__(self, resolved):
        spec = resolved["spec"]
        self.spec = spec
        self.resolved = resolved
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


def classify(resolved):
    """Decide expressibility of a case from fattn's resolved model of it (the
    canonical spec under "spec", the window and formats fattn derives).

    Expressible means PyTorch's cuDNN SDPA (aten::_scaled_dot_product_cudnn_
    attention, what F.scaled_dot_product_attention dispatches to) builds the
    cuDNN graph fattn's cuDNN engine builds for the case: docs/torch.md.
    """
    v = Verdict(resolved)
    spec = resolved["spec"]
    r = v.reasons
    if spec["dtype"] not in ("float16", "bfloat16"):
        r.append("%s io: PyTorch's cuDNN attention takes float16/bfloat16 only" % spec["dtype"])
    if spec["layout"].startswith("paged"):
        r.append("paged KV layout: PyTorch's SDPA has no paged KV cache")
    thd = resolved["thd"] if "thd" in resolved else \
        "thd" in spec["layout"] or spec["layout"].startswith("t")
    if thd:  # TE's THD always comes with a padding mask: one reason for both
        r.append("THD layout: PyTorch's cuDNN SDPA is dense [b,h,s,d], no ragged offsets "
                 "or sequence lengths")
    mask = spec["mask"]
    if mask.startswith("padding") and not thd:
        r.append("%s mask: PyTorch's dense cuDNN SDPA passes no sequence lengths" % mask)
    elif mask == "causal_bottom_right" and spec["sq"] != spec["skv"]:
        r.append("bottom-right causal with sq %d != skv %d: PyTorch's is_causal is top-left"
                 % (spec["sq"], spec["skv"]))
    if "error" in resolved:
        r.append("%s (TE refuses it)" % resolved["error"])
    else:
        w = tuple(resolved["window"])
        if w not in ((-1, -1), (-1, 0)):
            r.append("sliding window (%d, %d): not in PyTorch's SDPA" % w)
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
    if spec.get("fp8"):
        r.append("FP8 (quantised Q, K, V, P and O): not in PyTorch's SDPA")
    if spec.get("expect_refusal") and "error" not in resolved:
        r.append("an expected refusal: TE refuses it (rule %s)" % spec["expect_refusal"]["rule"])
    if spec.get("cpu_offload"):
        r.append("CPU offload v1: both front ends refuse it (not modelled)")
    if spec["is_training"] and spec["dropout_p"] > 0:
        r.append("dropout %r: PyTorch draws its own Philox mask and offsets"
                 % spec["dropout_p"])
    if spec["return_max_logit"]:
        r.append("return_max_logit: not in PyTorch's SDPA")
    if spec["is_training"] and spec["deterministic"] and v.backward_reason is None:
        v.backward_reason = ("deterministic backward: TE's graph writes dQ directly, PyTorch's "
                             "accumulates it in float32 (make the case with --make-cases)")
    return v


# --------------------------------------------------------------------------
# Tensors as fattn's engine saw them (harness/model/inputs.c, lib/core/tensor.c)
# --------------------------------------------------------------------------

# permutation from a format's logical order to [b, h, s, d], and back
TO_BHSD = {"sbhd": (1, 2, 0, 3), "bshd": (0, 2, 1, 3), "bhsd": (0, 1, 2, 3)}
FROM_BHSD = {"sbhd": (2, 0, 1, 3), "bshd": (0, 2, 1, 3), "bhsd": (0, 1, 2, 3)}


def qkv_storage(resolved):
    """How the harness allocates q, k, v (fh_inputs_alloc_qkv): a list of
    buffers, each (shape, pack axis or None, [tensor names]); packed layouts
    are views into one buffer with the pack axis removed, so they keep its
    strides. The shapes are fattn's resolved ones."""
    group = resolved["layout_group"]
    qs, ks, vs = (list(resolved["tensors"][n]["shape"]) for n in ("q", "k", "v"))

    def packed(shape, n, inner):  # 3hd/2hd: before h; h3d/h2d: before d
        at = len(shape) - (2 if inner else 1)
        return shape[:at] + [n] + shape[at:], at

    if group in ("3hd", "h3d"):
        return [packed(qs, 3, group == "3hd") + (["q", "k", "v"],)]
    out = [(qs, None, ["q"])]
    if group in ("hd_2hd", "hd_h2d"):
        out.append(packed(ks, 2, group == "hd_2hd") + (["k", "v"],))
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


def build_inputs(torch, np, resolved, inputs, device):
    """q, k, v in [b,h,s,d] with the strides fattn's engine used, on `device`."""
    dt = resolved["spec"]["dtype"]
    qf, kvf = resolved["q_format"], resolved["kv_format"]
    fmt = {"q": qf, "k": kvf, "v": kvf}
    views = {}
    for shape, at, names in qkv_storage(resolved):
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
        """Root attributes: fattn's key set (harness/run/runfile.c), PyTorch's values."""
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

    def compute(self, resolved, verdict, inputs, scale, backward):
        """out [b,h,sq,dv], stats [b,h,sq,1] float32 and, when `backward`,
        (dq, dk, dv) in [b,h,s,d]; plus a note on the public-SDPA check."""
        torch = self.torch
        import numpy as np
        spec = resolved["spec"]
        q, k, v = build_inputs(torch, np, resolved, inputs, self.device)
        bias = None
        if "attn_bias" in inputs:
            bias = _to_torch(torch, np, inputs["attn_bias"]["data"],
                             spec["dtype"]).to(self.device)
        d_out = None
        if backward:
            d_out = _to_torch(torch, np, inputs["d_out"]["data"], spec["dtype"])
            d_out = d_out.to(self.device).permute(*TO_BHSD[resolved["q_format"]])
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
    """The CUDA version as harness/run/runfile.c writes it (1000·major + 10·minor)."""
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


def recorded_spec(path, cid, case):
    """A recorded case's spec attribute, parsed (fattn checks the rest)."""
    spec_text = _attr_value(case, "spec")
    if not isinstance(spec_text, str):
        raise InputError("%s: case %s: no spec attribute" % (path, cid))
    try:
        raw = json.loads(spec_text)
    except ValueError as e:
        raise InputError("%s: case %s: spec is not JSON: %s" % (path, cid, e))
    if not isinstance(raw, dict) or raw.get("id") != cid:
        raise InputError("%s: case %s: spec id is '%s'" % (
            path, cid, raw.get("id") if isinstance(raw, dict) else raw))
    return raw


def resolve_recorded(path, cases, fattn=None):
    """fattn's resolved model of every recorded case, by id."""
    specs = [recorded_spec(path, cid, cases[cid]) for cid in sorted(cases)]
    try:
        return {r["id"]: r for r in fr.resolve_specs(specs, fattn)}
    except InputError as e:
        raise InputError("%s: a recorded spec: %s" % (path, e))


def case_verdict(path, cid, case, resolved):
    """Classify a recorded case: its resolved spec, then what the file holds."""
    spec = resolved["spec"]
    v = classify(resolved)
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
    return v


def recompute_case(path, cid, case, v, engine):
    """The case group with PyTorch's tensors in place of fattn's."""
    torch = engine.torch
    import numpy as np
    resolved, spec = v.resolved, v.spec
    inputs = case["children"]["inputs"]["children"]
    ctx = _node(case, "save_ctx")
    scale = _attr_value(ctx, "attn_scale") if ctx is not None else None
    if scale is None:  # --until forward: the scale fattn resolves (TE's default)
        scale = resolved["attn_scale"]
    scale = float(np.float32(scale))
    if ctx is not None and _attr_value(ctx, "bottom_right_diagonal") is not None:
        brd = bool(_attr_value(ctx, "bottom_right_diagonal"))
        if brd != resolved["bottom_right_diagonal"]:
            raise InputError("%s: case %s: save_ctx@bottom_right_diagonal disagrees with "
                             "the spec" % (path, cid))
    try:
        res = engine.compute(resolved, v, inputs, scale, bool(v.backward))
    except InputError as e:
        raise InputError("%s: case %s: %s" % (path, cid, e))
    qf, kvf = resolved["q_format"], resolved["kv_format"]
    dt = spec["dtype"]
    new = {"out": _from_torch(torch, np, res["out"].permute(*FROM_BHSD[qf]), dt),
           "stats": _from_torch(torch, np, res["stats"].float(), "float32")}
    if v.backward:
        for name, g, fmt in zip(("dq", "dk", "dv"), res["grads"], (qf, kvf, kvf)):
            new[name] = _from_torch(torch, np, g.permute(*FROM_BHSD[fmt]), dt)
    out = fr.copy_tree(case)
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


def run_reference(args):
    fr.find_fattn(args.fattn)  # before anything is read: the tool cannot go on without it
    src = fr.load_tree(args.run)
    cases = src["children"]["cases"]["children"]
    resolved = resolve_recorded(args.run, cases, args.fattn)
    verdicts = {}
    for cid in sorted(cases):
        verdicts[cid] = case_verdict(args.run, cid, cases[cid], resolved[cid])
    torch = import_torch()
    engine = Engine(torch, args.device, args.sdpa_backend)
    out_cases = {}
    report = []
    failed = 0
    for cid in sorted(cases):
        v = verdicts[cid]
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
                group, replaced, public = recompute_case(args.run, cid, cases[cid], v, engine)
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
    fr.write_tree(args.output, root, args.fattn)
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

def make_case(c, resolved):
    """One case of --make-cases: (report entry, the case to write or None).

    `c` is the case object as written, `resolved` fattn's model of it.
    `deterministic` becomes false: PyTorch's backward accumulates dQ in
    float32, the graph TE builds for a non-deterministic backward. A case whose
    backward PyTorch still cannot express (post_scale_bias: TE's backward
    computes dBias) becomes an inference case, so that its forward is compared
    and fattn's side records nothing that PyTorch's file lacks."""
    v = classify(resolved)
    entry = {"id": c["id"], "expressible": v.forward, "reason": v.reason(),
             "backward": v.backward}
    if not v.forward:
        return entry, None
    c = dict(c)
    c["deterministic"] = False
    changed = {"deterministic": False}
    # neither key changes what fattn resolves apart from the spec itself
    v = classify(dict(resolved, spec=dict(resolved["spec"], deterministic=False)))
    if v.backward is False:
        c["is_training"] = False
        changed["is_training"] = False
    entry.update({"reason": v.reason(), "backward": v.backward, "changed": changed})
    return entry, c


def make_cases(args):
    spec_path = args.run or DEFAULT_SPEC
    fr.find_fattn(args.fattn)
    cases = read_cases(spec_path, args.fattn)
    keep, report = [], []
    for c, resolved in cases:
        entry, made = make_case(c, resolved)
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
    p.add_argument("--fattn", metavar="PATH",
                   help="the fattn executable (default: $FATTN, else build*/harness/fattn "
                        "of this source tree, else fattn on PATH)")
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
