"""Discovery mode: import TE with a permissive shim that logs each name the
import chain asks transformer_engine_torch for, and where (file:line).

With --run FILTER, TE is imported with the real shim instead, and the cases
FILTER names are run (`fattn-te run`'s path, CPU engine) while every name
TE's code reads from the shim is logged: what the run reaches, e.g.
`--run 'fp8.*'` for the FP8 path. `--run F1 F2 ...` runs each filter's cases
in turn on the one import and prints each filter's names after a line
`== FILTER`. A name that is not in the table fails by name either way."""
import inspect
import os
import sys
import tempfile
import types

log = []

class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _ph(cls.__name__ + "." + name)
    def __iter__(cls):
        return iter(())
    def __int__(cls):
        return 0
    __index__ = __int__
    def __hash__(cls):
        return id(cls)

def _ph(name):
    return _Meta(name, (), {"__init__": lambda self, *a, **k: None})

def _caller():
    for fr in inspect.stack()[2:]:
        if "transformer_engine" in fr.filename:
            return "%s:%d" % (fr.filename.split("transformer_engine/", 1)[-1], fr.lineno)
    return "?"

def main(te_root):
    from fattn_te import shim
    mod = shim.make_module()
    def ga(name):
        if name.startswith("__"):
            raise AttributeError(name)
        log.append((name, _caller()))
        return _ph(name)
    mod.__getattr__ = ga
    from fattn_te import loader
    loader.import_backends(te_root, module=mod)
    seen = set()
    for n, w in log:
        if n not in seen:
            seen.add(n)
            print(n, w)

class _Logged(types.ModuleType):
    def __getattribute__(self, name):
        if not name.startswith("__"):
            log.append((name, _caller()))
        return super().__getattribute__(name)


def run(te_root, filts):
    """The names the shim is asked for while each filter's cases run (one
    TE import for all: the import is most of the time)."""
    from fattn_te import cli, loader, shim
    mod = shim.make_module()
    mod.__class__ = _Logged
    loader.import_backends(te_root, module=mod)
    for filt in filts:
        del log[:]  # the import chain's reads (main() lists those), the last filter's
        with tempfile.TemporaryDirectory(prefix="fattn-te-discover-") as d:
            cli.cmd_run_one(te_root, "cpu", None, filt, os.path.join(d, "run.h5"),
                            cli.rf.find_fattn(), "module", d)
        seen = {}
        for n, w in log:  # TE's reads only ("?": fattn-te's own)
            if w != "?":
                seen.setdefault(n, set()).add(w)
        if len(filts) > 1:
            print("==", filt)
        for n, ws in sorted(seen.items()):
            print(n, " ".join(sorted(ws)))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[2] == "--run":
        run(os.path.abspath(sys.argv[1]), sys.argv[3:])
    else:
        main(sys.argv[1])
