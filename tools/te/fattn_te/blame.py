"""Who raised a case's error (docs/te.md, "Errors per case"). Three
answers, each said in the recorded reason:

* TE: an exception from TE's code, or from what TE called (torch, the
  shim's stand-ins for TE's C++) on TE's behalf, named with the innermost
  TE line of its traceback; autograd's checks of what TE's backward
  returned are TE's too, at the line FusedAttnFunc.backward returned from;
* TE's hand-off: what TE handed the engine (contract.py) or its own
  backward (the ctx the recorder reads) is inconsistent;
* fattn-te itself: any other exception whose innermost owned frame is
  fattn-te's. That is not a result about TE: the run stops with exit 2
  (ToolError), naming the case, the exception and fattn-te's line.
"""
import os
import re
import sys
import threading
import traceback

TE_DIR = os.sep + "transformer_engine" + os.sep
TOOL_DIR = os.sep + "fattn_te" + os.sep

# What PyTorch's autograd engine raises when a Function's backward returns
# gradients it refuses (torch/csrc/autograd/engine.cpp validate_outputs):
# TE's result, though no TE frame is on the stack.
_AUTOGRAD = re.compile(r"^(?:Function|function) (\w+)Backward returned ")


class CaseError(Exception):
    """What TE handed the recorder (its output, its ctx for backward) does
    not fit the run-file contract: a result about TE (record.py raises it,
    classify names it)."""


class ToolError(Exception):
    """fattn-te's own error in a case: the run stops, exit 2."""

    def __init__(self, case, reason):
        self.case, self.reason = case, reason
        super().__init__(f"case {case}: {reason}")


def _owner(filename):
    if TE_DIR in filename:
        return "te"
    if TOOL_DIR in filename:
        return "tool"
    return None


def _rel(filename, marker):
    i = filename.rfind(marker)
    return filename[i + 1:] if i >= 0 else filename


def where(exc):
    """(owner, "path:line") of the innermost frame of exc's traceback that
    belongs to TE or to fattn-te; (None, None) without one. A frame of
    torch or Python below it is called on that owner's behalf."""
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        o = _owner(fr.filename)
        if o == "te":
            return o, f"{_rel(fr.filename, TE_DIR)}:{fr.lineno}"
        if o == "tool":
            return o, f"tools/te/{_rel(fr.filename, TOOL_DIR)}:{fr.lineno}"
    return None, None


class BackwardReturn:
    """Records the line TE's FusedAttnFunc.backward returned from while
    autograd runs it (a profile hook on that one code object, on every
    thread), so that autograd's refusal of its gradients names TE's line."""

    def __init__(self, func):
        self.code = getattr(getattr(func, "backward", None), "__code__", None)
        self.line = None

    def _hook(self, frame, event, arg):
        if event == "return" and frame.f_code is self.code:
            self.line = f"{_rel(frame.f_code.co_filename, TE_DIR)}:{frame.f_lineno}"

    def __enter__(self):
        if self.code is not None:
            self._old = sys.getprofile()
            sys.setprofile(self._hook)
            threading.setprofile(self._hook)
        return self

    def __exit__(self, *exc):
        if self.code is not None:
            sys.setprofile(self._old)
            threading.setprofile(None)
        return False


last_backward = None  # the BackwardReturn of the case running (record.py sets it)


def classify(exc):
    """(who, reason) of a case's exception; who is "te", "handoff" or
    "tool"."""
    from . import contract
    msg = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, contract.HandoffError):
        return "handoff", f"inconsistent hand-off: {exc}"
    if isinstance(exc, CaseError):  # TE's ctx/output, as the recorder reads it
        return "handoff", f"inconsistent hand-off: {exc}"
    owner, loc = where(exc)
    name = type(exc).__name__
    if owner == "te":
        return "te", f"TE raised {name}: {msg} ({loc})"
    bw = last_backward
    if _AUTOGRAD.match(msg) and bw is not None and bw.line:
        return "te", (f"TE raised {name}: {msg} ({bw.line}: FusedAttnFunc.backward's "
                      f"return, refused by autograd)")
    return "tool", f"fattn-te's own error (not a result about TE): {name}: {msg}" + (
        f" ({loc})" if loc else "")
