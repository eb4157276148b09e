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
            b = io.BytesIO(); _s._DigestPickler(b, globals()).dump(v); data = b.getvalue()
            if rt:
                _st.loading_namespace = globals()
                try:
                    v2 = pickle.loads(data)
                finally:
                    _st.loading_namespace = None
                b = io.BytesIO(); _s._DigestPickler(b, globals()).dump(v2); data = b.getvalue()
            out[k] = hashlib.sha256(data).hexdigest()[:10]
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
        res[name] = [eval(value(d, f"_probe({rt})")) for rt in (False, True)]
    for rt in (0, 1):
        a, b = res["parent"][rt], res["child"][rt]
        print("roundtrip" if rt else "plain", sorted(k for k in a if a[k] != b.get(k)))

def test_dis(make_driver, tmp_path):
    import base64, pickletools, io, difflib
    parent = make_driver()
    assert run_in(parent, None, SETUP).status == "ok"
    assert save(parent, tmp_path / "state")["ok"] is True
    child = make_driver()
    assert load(child, tmp_path / "state")["ok"] is True
    outs = []
    for d in (parent, child):
        run_in(d, None, code("""
            def _pk(name):
                import io
                from sandlot_runtime import snapshot as _s
                b = io.BytesIO()
                _s._DigestPickler(b, globals()).dump(globals()[name])
                return b.getvalue()
        """))
        outs.append({n: base64.b64decode(eval(value(d, f"__import__('base64').b64encode(_pk({n!r})).decode()"))) for n in ("Sup", "DC")})
    for n in ("Sup", "DC"):
        a, b = outs[0][n], outs[1][n]
        oa, ob = io.StringIO(), io.StringIO()
        pickletools.dis(a, out=oa); pickletools.dis(b, out=ob)
        print(n, "\n".join(list(difflib.unified_diff(oa.getvalue().splitlines(), ob.getvalue().splitlines(), lineterm=""))[:60]))
