"""A stand-in for pytest, so that TE's test modules import and their test
functions run without pytest (tools/te/te-tests): the decorators record
what pytest would expand (parametrize lists, skipif conditions), skip()
raises Skipped, fixtures are plain functions. Nothing else of pytest is
emulated; a test that needs more fails, and te-tests says which."""
import itertools
import types


class Skipped(Exception):
    """pytest.skip / a true skipif."""


class _Param:
    def __init__(self, values, marks=(), id=None):
        self.values = values
        self.marks = marks if isinstance(marks, (list, tuple)) else [marks]
        self.id = id


class _Mark:
    def __init__(self, name, args, kwargs):
        self.name, self.args, self.kwargs = name, args, kwargs

    def __call__(self, fn):
        fn.__dict__.setdefault("pytestmark", []).append(self)
        return fn


class _MarkGenerator:
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def make(*args, **kwargs):
            if len(args) == 1 and callable(args[0]) and not kwargs and name != "skipif":
                return _Mark(name, (), {})(args[0])  # a bare @pytest.mark.slow
            return _Mark(name, args, kwargs)
        return make


def _skip(reason="", **_):
    raise Skipped(reason)


def _fixture(*args, **kwargs):
    if len(args) == 1 and callable(args[0]):
        return args[0]
    return lambda fn: fn


def _param(*values, marks=(), id=None):
    return _Param(values, marks, id)


def make_module():
    m = types.ModuleType("pytest")
    m.mark = _MarkGenerator()
    m.skip = _skip
    m.skip.Exception = Skipped
    m.fixture = _fixture
    m.param = _param
    m.Skipped = Skipped
    m.raises = None  # a test that asserts a raise is not one te-tests runs
    m.__fattn_stub__ = True
    return m


def _id_of(v):
    """pytest's id of one value: names of types and callables, str of the rest."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return str(v)
    name = getattr(v, "__name__", None)
    if name:
        return name
    return None


def expand(fn):
    """Every parameter combination of fn in pytest's order, as (test id,
    kwargs, skip reason or None): the decorators applied last (outermost)
    vary slowest, as pytest's ids read. A skipif mark of the function
    skips every combination."""
    marks = list(reversed(fn.__dict__.get("pytestmark", [])))  # outermost first
    axes, skip_reason = [], None
    for mk in marks:
        if mk.name == "skipif" and mk.args and mk.args[0]:
            skip_reason = mk.kwargs.get("reason", "skipif")
        elif mk.name == "skip":
            skip_reason = mk.kwargs.get("reason", "skip")
        elif mk.name == "parametrize":
            names, values = mk.args[0], list(mk.args[1])
            names = [n.strip() for n in names.split(",")] if isinstance(names, str) else names
            ids = mk.kwargs.get("ids")
            rows = []
            for i, v in enumerate(values):
                pmarks = []
                if isinstance(v, _Param):
                    pmarks, pid, v = v.marks, v.id, v.values
                    v = v if len(names) > 1 else v[0]
                else:
                    pid = None
                vals = list(v) if len(names) > 1 else [v]
                if pid is None and ids is not None:
                    pid = ids(vals[0]) if callable(ids) else ids[i]
                if pid is None:
                    parts = [_id_of(x) for x in vals]
                    pid = "-".join(p if p is not None else "%s%d" % (n, i)
                                   for p, n in zip(parts, names))
                skip = next((pm.kwargs.get("reason", "skip") for pm in pmarks
                             if (pm.name == "skipif" and pm.args and pm.args[0])
                             or pm.name == "skip"), None)
                rows.append((pid, dict(zip(names, vals)), skip))
            axes.append(rows)
    # pytest's ids: the decorator nearest the function first
    for combo in itertools.product(*reversed(axes)) if axes else [()]:
        kwargs, ids, why = {}, [], skip_reason
        for pid, kv, skip in combo:
            kwargs.update(kv)
            ids.append(str(pid))
            why = why or skip
        yield "-".join(ids), kwargs, why


def run(fn, kwargs, counts):
    """Runs one expanded test as pytest would and counts its outcome in
    `counts` ("ran", "skipped", "failed: <exception type>"); False when it
    failed (a test that fails on the stand-ins), else True."""
    try:
        fn(**kwargs)
    except Skipped:
        counts["skipped"] += 1
        return True
    except Exception as e:  # noqa: BLE001 -- the test itself failed on the stand-ins
        counts["failed: %s" % type(e).__name__] += 1
        return False
    counts["ran"] += 1
    return True
