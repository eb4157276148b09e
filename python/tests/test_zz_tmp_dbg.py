import json
from test_snapshot import run_in, value, code, save, load

SETUP = code("""
    import numpy as np, pandas as pd, datetime, collections, enum, dataclasses
    x = 40
    def f(v):
        return v + x
    class Point:
        def __init__(self, a):
            self.a = a
    class Sup(Point):
        def __init__(self, a):
            super().__init__(a)
        def m(self):
            return f(self.a)
    p = Point(3)
    s = Sup(4)
    df = pd.DataFrame({"a": np.arange(10), "b": ["s"] * 10, "c": pd.date_range("2020", periods=10)})
    ser = df["b"]
    cat = pd.Series(["a", "b", "a"], dtype="category")
    shared = [1, 2]
    d = {"a": shared, "b": shared, "s": {"x", "y", "z"}}
    arr = np.arange(100).reshape(10, 10).T
    lam = lambda q: q * x
    def outer():
        k = 3
        def inner(z):
            return z + k
        return inner
    inn = outer()
    Color = enum.Enum("Color", "RED GREEN")
    @dataclasses.dataclass
    class DC:
        a: int
        b: list
    dc = DC(1, [2])
    od = collections.OrderedDict(a=1)
    cyc = []; cyc.append(cyc)
""")

PROBE = code("""
    def _probe(rt):
        import io, hashlib, pickle
        from sandlot_runtime import snapshot as _s
        from sandlot_runtime.state import state as _st
        out = {}
        for k, v in list(globals().items()):
            if k.startswith('_') or k in ('In', 'Out', 'exit', 'quit', 'get_ipython'): continue
            try:
                out[k] = _s._DigestPickler(globals()).digest(v)[1][:10]
            except BaseException as e:
                out[k] = repr(e)[:50]
        return out
""")

def test_dbg(make_driver, tmp_path):
    parent = make_driver()
    assert run_in(parent, None, SETUP).status == "ok"
    assert save(parent, tmp_path / "state")["ok"] is True
    child = make_driver()
    assert load(child, tmp_path / "state")["ok"] is True
    res = {}
    for name, d in (("parent", parent), ("child", child)):
        assert run_in(d, None, PROBE).status == "ok"
        res[name] = [eval(value(d, f"_probe({rt})")) for rt in (False,)]
    for rt in (0,):
        a, b = res["parent"][rt], res["child"][rt]
        print(sorted((k, a[k], b.get(k)) for k in a if a[k] != b.get(k))); print(a)

TRACE = code("""
    def _trace(name):
        from sandlot_runtime import snapshot as _s
        logs = {}
        out = []
        class T(_s._DigestPickler):
            def _emit(self, data):
                out.append(("emit", len(self._parts), bytes(data)[:60]))
                super()._emit(data)
            def save(self, obj, save_persistent_id=True):
                if type(obj) in _s._ATOMS:
                    return super().save(obj, save_persistent_id)
                before = len(self._parts)
                tok, size = self._token(obj, save_persistent_id)
                top = self._parts[-1]
                logs.setdefault(id(top), bytearray()).extend(b"{" + tok[:4] + b"}")
                top.hash.update(tok); top.size += size
                out.append((len(self._parts), type(obj).__name__, repr(obj)[:50], tok[:5].hex()))
            def _token(self, obj, spi=True):
                key = id(obj)
                if key in self._depth or key in self._done:
                    return super()._token(obj, spi)
                part_holder = []
                orig = _s._Part
                r = super()._token(obj, spi)
                return r
        t = T(globals())
        t.digest(globals()[name])
        return out
""")

def test_trace(make_driver, tmp_path):
    parent = make_driver()
    assert run_in(parent, None, SETUP).status == "ok"
    assert save(parent, tmp_path / "state")["ok"] is True
    child = make_driver()
    assert load(child, tmp_path / "state")["ok"] is True
    res = []
    for d in (parent, child):
        assert run_in(d, None, TRACE).status == "ok"
        res.append(eval(value(d, "_trace('Sup')")))
    import difflib
    print("\n".join(difflib.unified_diff([repr(x) for x in res[0]], [repr(x) for x in res[1]], lineterm="", n=2)))
