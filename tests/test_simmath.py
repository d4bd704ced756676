"""lib.runtime.simmath: a kernel's `math` on the simulator gives CUDA's IEEE 754 results (inf, NaN, signed zeros, no
Python exceptions), in float32 for float32 arguments; checked against IEEE 754 / C99 Annex F's special values
here, and against the table recorded on the H200 (data/results/simmath.json, `python -m lib.runtime.simmath record`)
when it is there."""
import json
import math
import struct

import numpy as np
import pytest

import lib
from lib.runtime import simmath

F32 = np.float32
INF, NAN = math.inf, math.nan


def same(got, want) -> bool:
    """Equal as IEEE values: NaN equals NaN, and a zero's sign counts."""
    if isinstance(want, tuple):
        return isinstance(got, tuple) and len(got) == len(want) and all(map(same, got, want))
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


# (function, arguments, IEEE 754 / C99 Annex F result): where Python's math raises, and the signed zeros
ANNEX_F = [
    ("log", (0.0,), -INF), ("log", (-0.0,), -INF), ("log", (-1.0,), NAN), ("log", (-INF,), NAN),
    ("log", (INF,), INF), ("log2", (0.0,), -INF), ("log10", (-0.0,), -INF), ("log10", (-2.0,), NAN),
    ("log1p", (-1.0,), -INF), ("log1p", (-2.0,), NAN), ("log1p", (-0.0,), -0.0),
    ("sqrt", (-1.0,), NAN), ("sqrt", (-0.0,), -0.0), ("sqrt", (-INF,), NAN),
    ("exp", (1000.0,), INF), ("exp", (-INF,), 0.0), ("exp2", (2000.0,), INF), ("expm1", (1000.0,), INF),
    ("expm1", (-0.0,), -0.0), ("cosh", (1000.0,), INF), ("sinh", (-1000.0,), -INF), ("sinh", (-0.0,), -0.0),
    ("acos", (2.0,), NAN), ("asin", (-1.5,), NAN), ("asin", (-0.0,), -0.0), ("acosh", (0.5,), NAN),
    ("atanh", (1.0,), INF), ("atanh", (-1.0,), -INF), ("atanh", (2.0,), NAN), ("atanh", (-0.0,), -0.0),
    ("sin", (INF,), NAN), ("cos", (-INF,), NAN), ("tan", (INF,), NAN), ("sin", (-0.0,), -0.0),
    ("tan", (-0.0,), -0.0), ("atan", (-0.0,), -0.0), ("tanh", (-INF,), -1.0), ("asinh", (-0.0,), -0.0),
    ("gamma", (0.0,), INF), ("gamma", (-0.0,), -INF), ("gamma", (-2.0,), NAN), ("gamma", (-INF,), NAN),
    ("gamma", (200.0,), INF), ("lgamma", (0.0,), INF), ("lgamma", (-3.0,), INF), ("lgamma", (1e308,), INF),
    ("floor", (-0.5,), -1.0), ("floor", (-0.0,), -0.0), ("ceil", (-0.5,), -0.0), ("trunc", (-0.7,), -0.0),
    ("floor", (INF,), INF), ("ceil", (NAN,), NAN), ("trunc", (-INF,), -INF), ("floor", (2.5,), 2.0),
    ("pow", (0.0, -1.0), INF), ("pow", (-0.0, -3.0), -INF), ("pow", (-0.0, -2.0), INF),
    ("pow", (-0.0, -2.5), INF), ("pow", (-8.0, 1 / 3), NAN), ("pow", (10.0, 400.0), INF),
    ("pow", (-10.0, 309.0), -INF), ("pow", (-10.0, 310.0), INF), ("pow", (-0.0, 3.0), -0.0),
    ("pow", (NAN, 0.0), 1.0), ("pow", (1.0, NAN), 1.0), ("pow", (-1.0, INF), 1.0),
    ("fmod", (1.0, 0.0), NAN), ("fmod", (INF, 2.0), NAN), ("fmod", (-0.0, 2.0), -0.0), ("fmod", (3.0, INF), 3.0),
    ("remainder", (1.0, 0.0), NAN), ("remainder", (-INF, 1.0), NAN), ("hypot", (1.5e308, 1.5e308), INF),
    ("hypot", (INF, NAN), INF), ("ldexp", (1.0, 5000), INF), ("ldexp", (-1.0, 5000), -INF),
    ("ldexp", (-0.0, 3), -0.0), ("atan2", (-0.0, -1.0), -math.pi), ("copysign", (1.0, -0.0), -1.0),
    ("degrees", (1e308,), INF), ("frexp", (INF,), (INF, 0)), ("modf", (-INF,), (-0.0, -INF)),
]


@pytest.mark.parametrize("name, args, want", ANNEX_F, ids=[f"{n}{a}" for n, a, _ in ANNEX_F])
def test_annex_f_special_values_in_double(name, args, want):
    got = getattr(simmath, name)(*args)
    assert same(got, want), f"math.{name}{args} = {got!r}, IEEE 754 says {want!r}"


# float32 arguments: the same special values, and overflow at float32's range (where float64 does not)
FLOAT32 = [
    ("exp", (89.0,), INF), ("exp", (88.0,), float(F32(1.6516362549940018e38))), ("exp", (-104.0,), 0.0),
    ("exp2", (128.0,), INF), ("cosh", (90.0,), INF), ("sinh", (-90.0,), -INF), ("expm1", (89.0,), INF),
    ("pow", (10.0, 39.0), INF), ("pow", (-10.0, 39.0), -INF), ("hypot", (3e38, 3e38), INF),
    ("ldexp", (1.0, 128), INF), ("ldexp", (1.0, -150), 0.0), ("ldexp", (1.0, -149), 2.0 ** -149),
    ("gamma", (36.0,), INF), ("log", (0.0,), -INF), ("sqrt", (-1.0,), NAN), ("floor", (-0.25,), -1.0),
    ("trunc", (-0.25,), -0.0), ("nextafter", (1.0, 2.0), 1.0 + 2.0 ** -23), ("nextafter", (0.0, -1.0), -(2.0 ** -149)),
    ("degrees", (1e37,), INF),
]


@pytest.mark.parametrize("name, args, want", FLOAT32, ids=[f"{n}{a}" for n, a, _ in FLOAT32])
def test_float32_arguments_give_the_float32_result(name, args, want):
    args32 = tuple(F32(a) if isinstance(a, float) else a for a in args)
    got = getattr(simmath, name)(*args32)
    assert same(got, want), f"math.{name}{args32} = {got!r}, float32 IEEE 754 says {want!r}"


def _representable_in_float32(r: float) -> bool:
    return not math.isfinite(r) or struct.unpack("<f", struct.pack("<f", r))[0] == r


@pytest.mark.parametrize("name", simmath.FUNCTIONS)
def test_no_argument_makes_a_twin_raise_and_float32_stays_float32(name):
    fn = getattr(simmath, name)
    for precision in ("d", "f"):
        for args in simmath.table_inputs(name, precision):
            if precision == "f":
                args = tuple(F32(a) if isinstance(a, float) else np.int32(a) for a in args)
            got = fn(*args)
            for r in got if isinstance(got, tuple) else (got,):
                assert isinstance(r, (float, int)), (name, args, got)
                if precision == "f" and isinstance(r, float):
                    assert _representable_in_float32(r), (name, args, r)


def _ordered(v: float, precision: str) -> int:
    """The float's bits as an integer that counts ulps across zero (both zeros are 0)."""
    if precision == "f":
        i = int(np.array(v, np.float32).view(np.int32))
        return i if i >= 0 else -(i & 0x7FFFFFFF)
    i = int(np.array(v, np.float64).view(np.int64))
    return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF)


def _ulps(a: float, b: float, precision: str) -> int:
    return abs(_ordered(a, precision) - _ordered(b, precision))


@pytest.mark.parametrize("name", [n for n in simmath.FUNCTIONS if n not in ("frexp", "modf")])
def test_ordinary_values_agree_with_numpy_and_with_python(name):
    """Where Python's math has a result, the float64 twin returns it unchanged; the float32 twin (the float64
    result rounded once) is within 2 ulp of numpy's own float32 function, itself within about 2 ulp of the
    correctly rounded value, as the GPU's single-precision functions are."""
    py = getattr(math, name)
    numpy_f32 = {"pow": np.power, "fmod": np.fmod, "hypot": np.hypot, "atan2": np.arctan2, "copysign": np.copysign,
                 "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
                 "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan,
                 "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asin": np.arcsin, "acos": np.arccos,
                 "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
                 "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "fabs": np.fabs}.get(name)
    rng = np.random.default_rng(1)
    for _ in range(200):
        x = float(rng.uniform(0.05, 0.95) if name in ("asin", "acos", "atanh") else rng.uniform(1.1, 30.0))
        if name == "ldexp":
            args = (x, int(rng.integers(-3, 4)))
        elif simmath.ARITY.get(name, 1) == 2:
            args = (x, float(rng.uniform(0.5, 3.0)))
        else:
            args = (x,)
        if name == "lgamma" and 0.5 <= x <= 2.5:
            # near its zeros Python's lgamma is off by up to thousands of ulp; the twin sums the Taylor series
            # there (the GPU's table agrees with it: test_the_twins_agree_with_the_table_recorded_on_the_gpu)
            assert abs(simmath.lgamma(x) - py(x)) < 1e-14, (name, args)
            continue
        assert same(getattr(simmath, name)(*args), float(py(*args))), (name, args)
        if numpy_f32 is not None:
            a32 = tuple(F32(a) for a in args)
            with np.errstate(all="ignore"):
                reference = float(numpy_f32(*a32))
            assert _ulps(getattr(simmath, name)(*a32), reference, "f") <= 2, (name, a32)


def test_a_kernel_that_takes_the_log_of_an_idle_lanes_zero_runs_as_on_a_gpu():
    """The issue's case: every lane computes log(x) and only the lanes with x > 0 keep it."""
    if not lib.SIMULATOR:
        pytest.skip("the simulator's math")
    from numba import cuda

    from math import exp as imported_exp  # `from math import ...` reaches the twin as well

    @cuda.jit
    def log_where_positive(x, out):
        i = cuda.grid(1)
        if i < x.size:
            v = math.log(x[i])               # log(0) = -inf on idle lanes, no exception
            out[i] = v if x[i] > 0 else imported_exp(x[i] * 200.0)   # exp(float32) overflows at 89 in float32

    x = np.array([0.0, 1.0, np.e, -1.0, 0.5, 0.0], np.float32)
    out = np.zeros_like(x)
    log_where_positive[1, 32](x, out)
    np.testing.assert_allclose(out[[1, 2, 4]], np.log(x[[1, 2, 4]]), rtol=1e-6)
    assert out[0] == 1.0 and out[5] == 1.0 and out[3] == 0.0  # exp(0) and exp(-200) = 0
    assert math.log is not simmath.log  # the host's math is Python's again


def test_a_closure_and_a_device_function_see_the_twins_too():
    if not lib.SIMULATOR:
        pytest.skip("the simulator's math")
    import math as m
    from numba import cuda

    @cuda.jit(device=True)
    def safe_sqrt(v):
        return math.sqrt(v)

    def factory(mathmodule):
        def k(x, out):
            i = cuda.grid(1)
            out[i] = mathmodule.log(x[i]) + safe_sqrt(x[i])
        return k

    kernel = cuda.jit(factory(m))
    x = np.array([0.0, -1.0, 4.0], np.float32)
    out = np.zeros(3, np.float32)
    kernel[1, 3](x, out)
    assert out[0] == -np.inf and np.isnan(out[1]) and out[2] == pytest.approx(np.log(4) + 2)


# --- the H200's table ------------------------------------------------------------------------------
# CUDA's documented maximum ulp errors (CUDA C++ Programming Guide, "Mathematical functions", standard
# functions; float32 / float64), plus one for the simulator's own rounding; lgamma and tgamma are only
# compared outside the intervals where the guide gives no bound.
ULP = {"acos": (2, 2), "acosh": (4, 3), "asin": (2, 2), "asinh": (3, 3), "atan": (2, 2), "atan2": (3, 2),
       "atanh": (3, 2), "cos": (2, 2), "cosh": (2, 2), "erf": (2, 2), "erfc": (4, 5), "exp": (2, 1),
       "exp2": (2, 1), "expm1": (1, 1), "hypot": (3, 2), "lgamma": (6, 4), "log": (1, 1), "log10": (2, 1),
       "log1p": (1, 1), "log2": (1, 1), "pow": (4, 2), "sin": (2, 2), "sinh": (3, 2), "tan": (4, 2),
       "tanh": (2, 2), "gamma": (5, 10), "degrees": (1, 1), "radians": (1, 1)}
TABLE = lib.DATA / "results" / simmath.TABLE


def _compare_with_table(document) -> list[str]:
    problems = []
    for name, precisions in document["functions"].items():
        fn = getattr(simmath, name)
        for precision, rows in precisions.items():
            for args, result in rows:
                values = tuple(a if isinstance(a, int) else simmath.from_bits(a) for a in args)
                call = tuple(F32(v) if precision == "f" and isinstance(v, float) else v for v in values)
                got = fn(*call)
                got = got if isinstance(got, tuple) else (got,)
                want = tuple(r if isinstance(r, int) else simmath.from_bits(r) for r in result)
                if name == "frexp" and not math.isfinite(values[0]):
                    got, want = got[:1], want[:1]  # the exponent of inf or NaN is unspecified
                for g, w in zip(got, want):
                    if isinstance(w, int) or not math.isfinite(w) or w == 0 or not math.isfinite(g) or g == 0:
                        if not same(float(g), float(w)):
                            problems.append(f"{name}{values} [{precision}]: simulator {g!r}, GPU {w!r}")
                        continue
                    if name in ("lgamma", "gamma") and values[0] < 0:
                        continue  # no documented bound for negative arguments
                    limit = ULP.get(name, (0, 0))[0 if precision == "f" else 1] + 1
                    if _ulps(g, w, precision) > limit:
                        problems.append(f"{name}{values} [{precision}]: simulator {g!r}, GPU {w!r} "
                                        f"({_ulps(g, w, precision)} ulp > {limit})")
    return problems


@pytest.mark.skipif(not TABLE.exists(), reason="data/results/simmath.json is recorded on the H200 "
                                               "(python -m lib.runtime.simmath record); not recorded yet")
def test_the_twins_agree_with_the_table_recorded_on_the_gpu():
    document = json.loads(TABLE.read_text())
    assert set(document["functions"]) == set(simmath.FUNCTIONS)
    problems = _compare_with_table(document)
    assert not problems, f"{len(problems)} differences from {document['device']}:\n" + "\n".join(problems[:40])


def test_lgamma_is_accurate_next_to_its_zeros():
    """Relative accuracy where lgamma crosses zero (x = 1, 2), against the recurrence and the known values
    lgamma(1/2) = log(sqrt(pi)) and lgamma(3/2) = log(sqrt(pi) / 2)."""
    assert abs(simmath.lgamma(0.5) - math.log(math.sqrt(math.pi))) <= 2 * math.ulp(0.5723649429247001)
    # lgamma(3/2) = log(sqrt(pi) / 2) = -0.120782237635245222345518445781647212251852647...
    assert abs(simmath.lgamma(1.5) - -0.12078223763524522234551844578) <= 2 * math.ulp(0.1207822376352452)
    for z in (2.0 ** -10, -2.0 ** -10, 2.0 ** -20, 0.25, -0.25, 0.375):  # 1 + z and 2 + z exact
        near1, near2 = simmath.lgamma(1 + z), simmath.lgamma(2 + z)
        assert abs(near2 - (near1 + math.log1p(z))) <= 4 * (math.ulp(near2) + math.ulp(near1) + math.ulp(math.log1p(z))), z
        assert abs(near1 / (-0.5772156649015329 * z) - 1) < 2 * abs(z), z  # lgamma(1 + z) ≈ -γz
    assert simmath.lgamma(1.0) == 0.0 and simmath.lgamma(2.0) == 0.0


def test_the_table_comparison_finds_a_wrong_value():
    """The comparison itself: a table that says log(0) is 0, or exp(1) is an ulp-distant value, is caught."""
    one = simmath._bits(math.e, "d")
    bumped = simmath._bits(np.nextafter(np.nextafter(np.nextafter(math.e, 4), 4), 4), "d")
    document = {"functions": {"log": {"d": [[[simmath._bits(0.0, "d")], [simmath._bits(0.0, "d")]]]},
                              "exp": {"d": [[[simmath._bits(1.0, "d")], [one]], [[simmath._bits(1.0, "d")], [bumped]]]}}}
    problems = _compare_with_table(document)
    assert len(problems) == 2 and problems[0].startswith("log(0.0,) [d]: simulator -inf, GPU 0.0") and "ulp > 2" in problems[1]
