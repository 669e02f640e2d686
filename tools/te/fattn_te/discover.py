"""Discovery mode: import TE with a permissive shim that logs each name the
import chain asks transformer_engine_torch for, and where (file:line)."""
import inspect
import sys

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

if __name__ == "__main__":
    main(sys.argv[1])
