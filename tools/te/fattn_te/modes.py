"""Modes a case runs the module in (docs/te.md, "Modes"): train() or eval()
by the spec's is_training (FusedAttention derives is_training from
self.training, 2.20.2 backends.py:2599), and the grad mode its forward runs
under: the spec's no_grad (torch.no_grad()) or inference_mode
(torch.inference_mode()), else grad enabled.

Under no_grad or inference_mode autograd keeps no graph: the output has no
grad_fn to find TE's ctx by, and autograd drops what the forward hands
ctx.save_for_backward (ctx.saved_tensors is empty). TE's FusedAttnFunc.forward
still builds its ctx and saves its tensors; CtxCapture keeps both, by a
profile hook on the forward's one code object (the ctx is its first
argument) and the tensors that ctx's save_for_backward is handed, so that
save_ctx records what TE's forward saved, as for a case with grad."""
import contextlib
import sys
import threading

import torch


def grad_mode(spec):
    """"no_grad", "inference_mode" (either or both) or None (grad enabled)."""
    m = [k for k in ("no_grad", "inference_mode") if spec.get(k)]
    return "+".join(m) or None


def context(spec):
    """The grad mode's context manager(s), inference_mode inside no_grad."""
    stack = contextlib.ExitStack()
    if spec.get("no_grad"):
        stack.enter_context(torch.no_grad())
    if spec.get("inference_mode"):
        stack.enter_context(torch.inference_mode())
    return stack


def has_backward(spec):
    """Training, with grad: the runner's fh_spec_has_backward."""
    return bool(spec["is_training"]) and grad_mode(spec) is None


class CtxCapture:
    """TE's FusedAttnFunc ctx of the forward run inside, and the tensors its
    forward handed ctx.save_for_backward."""

    def __init__(self, func):
        self.code = func.forward.__code__
        self.ctx, self.saved = None, None

    def _hook(self, frame, event, arg):
        if event != "call" or frame.f_code is not self.code or self.ctx is not None:
            return
        ctx = frame.f_locals.get("ctx")
        if ctx is None:
            return
        self.ctx = ctx
        original = ctx.save_for_backward

        def save_for_backward(*tensors):
            self.saved = tuple(tensors)
            return original(*tensors)
        ctx.save_for_backward = save_for_backward

    def __enter__(self):
        self._old = sys.getprofile()
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._old)
        threading.setprofile(None)
        return False
