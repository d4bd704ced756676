"""CUDA's ``math`` on the simulator: IEEE 754 results where Python's ``math`` raises or rounds differently.

On a GPU, numba compiles ``math.log(x)`` to libdevice's ``logf`` (float32 arguments) or ``log`` (float64),
which follow IEEE 754 and C99's Annex F: ``log(0)`` is ``-inf``, ``sqrt(-1)`` is NaN, ``exp(1000)`` is
``inf``, ``floor(-0.5)`` is ``-0.0``, and nothing raises. Python's ``math`` raises ``ValueError`` ("math
domain error") or ``OverflowError`` for the same arguments, so on numba's simulator a correct kernel that
takes ``math.log`` of a value it then discards (an idle lane's 0) stopped with a Python exception.

Each function here is the twin of the ``math`` function of the same name that numba-cuda compiles for a GPU
(the list in numba-cuda's ``cudamath.py``): Python's result where Python gives one, else the IEEE result.
The precision follows numba's typing: when every floating-point argument is a ``numpy.float32`` (a value
read from a float32 array), the result is the float32 value the GPU's single-precision function returns
(overflow to ``inf`` at float32's range, e.g. ``exp(float32(89))`` is ``inf``), rounded once from the
float64 result; likewise for ``numpy.float16``; anything else (Python floats and ints, float64) is float64.
Results are Python floats (ints for none: ``floor``, ``ceil`` and ``trunc`` return floats, as on a GPU),
so arithmetic on them keeps the simulator's usual types. Values agree with the GPU's to the functions'
documented error bounds (a few ulp), not bit for bit; special values (inf, NaN, signed zeros) agree exactly.

:data:`MODULE` is a ``math`` module whose functions are the twins (lib.runtime.simulator puts it in place of
``math`` in a kernel's globals and closures while the kernel runs); :data:`TWINS` maps each of Python's
functions to its twin (for ``from math import log``).

``python -m lib.runtime.simmath record [FILE]`` (on a GPU) records what the GPU's functions return for the inputs
of :func:`table_inputs` into ``data/results/simmath.json``; ``tests/test_simmath.py`` compares the twins
with that table when it is there, and with IEEE 754's special values always.
"""
from __future__ import annotations

import linecache
import math
import struct
import sys
import types
from pathlib import Path

import numpy as np

INF, NAN = math.inf, math.nan
_F32, _F16 = np.float32, np.float16
_PACK_F, _PACK_E = struct.Struct("<f"), struct.Struct("<e")


def to_float32(r: float) -> float:
    """r rounded to the nearest float32 (to even on ties), overflowing to +-inf: a Python float."""
    try:
        return _PACK_F.unpack(_PACK_F.pack(r))[0]
    except OverflowError:
        return math.copysign(INF, r)


def to_float16(r: float) -> float:
    try:
        return _PACK_E.unpack(_PACK_E.pack(r))[0]
    except OverflowError:
        return math.copysign(INF, r)


def _precision(args) -> str:
    """'f' if every floating-point argument is float32, 'e' if float16, else 'd' (numba unifies a float32
    with a float64 or an int64 to float64)."""
    kinds = {type(a) for a in args}
    if kinds == {_F32}:
        return "f"
    if kinds == {_F16}:
        return "e"
    return "d"


def _rounded(r: float, precision: str) -> float:
    if precision == "f":
        return to_float32(r)
    if precision == "e":
        return to_float16(r)
    return r


def _is_odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0.0


# --- what C99 Annex F returns where Python's math raises --------------------------------------------------
def _log_error(x):
    return -INF if x == 0 else NAN


_UNARY_ERRORS = {
    "acos": lambda x: NAN, "asin": lambda x: NAN, "acosh": lambda x: NAN,
    "atanh": lambda x: math.copysign(INF, x) if abs(x) == 1 else NAN,
    "cos": lambda x: NAN, "sin": lambda x: NAN, "tan": lambda x: NAN,
    "cosh": lambda x: INF, "sinh": lambda x: math.copysign(INF, x),
    "exp": lambda x: INF if x > 0 else 0.0, "exp2": lambda x: INF if x > 0 else 0.0,
    "expm1": lambda x: INF if x > 0 else -1.0,
    "log": _log_error, "log2": _log_error, "log10": _log_error,
    "log1p": lambda x: -INF if x == -1 else NAN,
    "sqrt": lambda x: NAN,
    "gamma": lambda x: (math.copysign(INF, x) if x == 0 else
                        NAN if x == -INF or (x < 0 and x == math.floor(x)) else
                        -INF if -1 < x < 0 else INF),
    "lgamma": lambda x: INF,
    "erf": lambda x: NAN, "erfc": lambda x: NAN, "atan": lambda x: NAN, "asinh": lambda x: NAN,
    "tanh": lambda x: NAN, "fabs": lambda x: abs(x),
    "degrees": lambda x: x * (180.0 / math.pi), "radians": lambda x: x * (math.pi / 180.0),
}
_EXACT = {"fabs"}  # the float64 result is the float32 one: no rounding needed


# --- lgamma near its zeros ----------------------------------------------------------------------------------
# CPython's math.lgamma (a Lanczos sum) has a small *absolute* error, so near the zeros of lgamma (x = 1, 2)
# its relative error grows to thousands of ulp (on the H200 libdevice's lgamma was within a few ulp of the
# truth there: lgamma(1.001) differed by 1407 ulp). Between 0.5 and 2.5 the twin sums the Taylor series about
# 1 or 2 instead: lgamma(1 + z) = -γz + Σ_{k≥2} (-1)^k ζ(k) z^k / k and
# lgamma(2 + z) = (1 - γ)z + Σ_{k≥2} (-1)^k (ζ(k) - 1) z^k / k, |z| <= 0.5.
_EULER_GAMMA = 0.57721566490153286061


def _zeta_minus_one(k: int, n: int = 100) -> float:
    """ζ(k) - 1 = Σ_{m>=2} m^-k, the first n - 2 terms summed and the rest by Euler-Maclaurin."""
    head = math.fsum(m ** -k for m in range(n - 1, 1, -1))
    tail = (n ** (1 - k) / (k - 1) + 0.5 * n ** -k + k * n ** (-k - 1) / 12
            - k * (k + 1) * (k + 2) * n ** (-k - 3) / 720
            + k * (k + 1) * (k + 2) * (k + 3) * (k + 4) * n ** (-k - 5) / 30240)
    return head + tail


_ZETA1 = [_zeta_minus_one(k) for k in range(2, 64)]   # ζ(k) - 1 for k = 2..63
# the series' coefficients (-1)^k c_k / k, k = 63 down to 2 (the order Horner's rule takes them), c_k = ζ(k) about
# 1 and ζ(k) - 1 about 2
_LGAMMA_ABOUT = {two: tuple((-1.0) ** k * (z1 if two else z1 + 1.0) / k
                            for k, z1 in reversed(list(enumerate(_ZETA1, 2))))
                 for two in (False, True)}


def _lgamma_series(z: float, about_two: bool) -> float:
    total = 0.0
    for c in _LGAMMA_ABOUT[about_two]:  # Σ_{k>=2} c z^k by Horner's rule, the smallest terms first
        total = total * z + c
    return total * z * z + ((1.0 - _EULER_GAMMA) if about_two else -_EULER_GAMMA) * z


def _lgamma(x):
    x = float(x)
    if 0.5 <= x <= 1.5:
        return _lgamma_series(x - 1.0, about_two=False)
    if 1.5 < x <= 2.5:
        return _lgamma_series(x - 2.0, about_two=True)
    return math.lgamma(x)


_ACCURATE = {"lgamma": _lgamma}


def _unary(name):
    f = _ACCURATE.get(name) or getattr(math, name)
    on_error = _UNARY_ERRORS[name]
    exact = name in _EXACT

    def twin(x):
        try:
            r = f(x)
        except (ValueError, OverflowError):
            r = on_error(float(x))
        kind = type(x)
        if kind is _F32:
            return r if exact else to_float32(r)
        if kind is _F16:
            return to_float16(r)
        return r

    twin.__name__ = twin.__qualname__ = name
    twin.__doc__ = f"math.{name} with CUDA's IEEE 754 results (see lib.runtime.simmath)"
    return twin


def _rounding(name):
    """floor, ceil, trunc: a float (as on a GPU), the sign of a zero result that of x, inf and NaN kept."""
    f = getattr(math, name)

    def twin(x):
        x = float(x)
        if not math.isfinite(x) or abs(x) >= 4503599627370496.0:  # 2**52: already an integer
            return x
        r = float(f(x))
        return math.copysign(0.0, x) if r == 0 else r

    twin.__name__ = twin.__qualname__ = name
    twin.__doc__ = f"math.{name} as on a GPU: a float, -0.0 kept, inf and NaN passed through"
    return twin


def pow(x, y):  # noqa: A001 - the twin of math.pow
    """math.pow with C99's results: pow(0, -1) = inf, pow(-0.0, -3) = -inf, pow(-8, 1/3) = NaN, overflow
    to +-inf (negative for a negative base and an odd integer exponent)."""
    precision = _precision((x, y))
    try:
        r = math.pow(x, y)
    except (ValueError, OverflowError):
        xf, yf = float(x), float(y)
        odd = _is_odd_integer(yf)
        if xf == 0:  # y < 0: a pole
            r = math.copysign(INF, xf) if odd else INF
        elif xf < 0 and yf != math.floor(yf):
            r = NAN
        else:  # overflow
            r = -INF if (xf < 0 and odd) else INF
    return _rounded(r, precision)


def _binary(name, on_error):
    f = getattr(math, name)

    def twin(x, y):
        precision = _precision((x, y))
        try:
            r = f(x, y)
        except (ValueError, OverflowError):
            r = on_error(float(x), float(y))
        return _rounded(r, precision)

    twin.__name__ = twin.__qualname__ = name
    twin.__doc__ = f"math.{name} with CUDA's IEEE 754 results (see lib.runtime.simmath)"
    return twin


fmod = _binary("fmod", lambda x, y: NAN)             # fmod(x, 0) and fmod(inf, y)
remainder = _binary("remainder", lambda x, y: NAN)   # remainder(x, 0) and remainder(inf, y)
hypot = _binary("hypot", lambda x, y: INF)           # overflow
atan2 = _binary("atan2", lambda x, y: NAN)
copysign = _binary("copysign", lambda x, y: NAN)


def nextafter(x, y):
    """The next representable value after x towards y, in x's precision (float32 steps for float32)."""
    precision = _precision((x, y))
    if precision == "f":
        return float(np.nextafter(_F32(x), _F32(y)))
    if precision == "e":
        return float(np.nextafter(_F16(x), _F16(y)))
    return math.nextafter(x, y)


def ldexp(x, i):
    """x * 2**i, overflowing to +-inf (precision from x: float32 for a float32 x, as numba types it)."""
    try:
        r = math.ldexp(x, int(i))
    except OverflowError:
        r = math.copysign(INF, float(x))
    return _rounded(r, _precision((x,)))


def frexp(x):
    m, e = math.frexp(x)  # exact in any precision; frexp(inf) = (inf, 0), frexp(nan) = (nan, 0)
    return m, e


def modf(x):
    return math.modf(x)  # exact; modf(inf) = (0.0, inf)


def log(x, *base):
    """math.log(x) with log(0) = -inf and log(x < 0) = NaN; with a base, log(x) / log(base)."""
    if not base:
        return _log(x)
    a, b = _log(x), _log(base[0])
    if b == 0:
        return NAN if a == 0 or a != a else math.copysign(INF, a)
    return a / b


_log = _unary("log")

_TWIN_NAMES = ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "tanh",
               "exp", "exp2", "expm1", "log2", "log10", "log1p", "sqrt", "gamma", "lgamma", "erf", "erfc",
               "fabs", "degrees", "radians")
_namespace = sys.modules[__name__].__dict__
for _name in _TWIN_NAMES:
    if hasattr(math, _name):  # exp2: Python 3.11+
        _namespace[_name] = _unary(_name)
floor, ceil, trunc = _rounding("floor"), _rounding("ceil"), _rounding("trunc")

FUNCTIONS = tuple(n for n in (*_TWIN_NAMES, "floor", "ceil", "trunc", "pow", "fmod", "remainder", "hypot",
                              "atan2", "copysign", "nextafter", "ldexp", "frexp", "modf", "log")
                  if hasattr(math, n))
"""The math functions numba-cuda compiles for a GPU that have a twin here (isnan, isinf, isfinite never
raise and are Python's own)."""

TWINS = {getattr(math, n): _namespace[n] for n in FUNCTIONS}

MODULE = types.ModuleType("math", "Python's math with the IEEE twins of lib.runtime.simmath (a kernel's view of math "
                                  "on the simulator)")
MODULE.__dict__.update({k: v for k, v in vars(math).items() if not k.startswith("__")})
MODULE.__dict__.update({n: _namespace[n] for n in FUNCTIONS})


# --- the GPU's table: what libdevice returns, recorded on a GPU, for tests/test_simmath.py -------------------
TABLE = "simmath.json"  # in data/results/
ARITY = {"pow": 2, "fmod": 2, "remainder": 2, "hypot": 2, "atan2": 2, "copysign": 2, "nextafter": 2, "ldexp": 2}
SPECIAL = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5, -2.5, 10.0, -10.0, 100.0, -100.0, 1000.0,
           -1000.0, 89.0, -104.0, 710.0, -746.0, 1e-40, -1e-40, 1e-310, 3e38, -3e38, 1e308, -1e308, 1e-8,
           0.1, 0.7, 0.999, 1.001, 171.5, 172.0, 35.0, 40.0, INF, -INF, NAN)


def table_inputs(name: str, precision: str) -> list[tuple]:
    """The arguments the table records for `name` in precision 'f' or 'd': IEEE 754's special values and
    the boundaries where float32 or float64 overflow, in every combination for two-argument functions, and
    a few ordinary values from a fixed seed. ldexp's second argument is an int32."""
    rng = np.random.default_rng(list(name.encode()) + [ord(precision)])
    ordinary = [float(v) for v in rng.uniform(-20, 20, 12)] + [float(v) for v in rng.uniform(0, 3, 8)]
    values = list(SPECIAL) + ordinary
    if precision == "f":  # what float32 can hold (1e-310, 1e308 and the like become 0 and inf)
        values = [to_float32(v) for v in values]
    if ARITY.get(name, 1) == 1:
        return [(v,) for v in values]
    if name == "ldexp":
        return [(v, e) for v in values[:20] for e in (-1100, -150, -1, 0, 1, 100, 1100)]
    small = values[:24] + [INF, -INF, NAN]
    return [(a, b) for a in small for b in small]


def _bits(value: float, precision: str) -> str:
    if precision == "f":
        return f"{int(np.array(value, np.float32).view(np.uint32)):08x}"
    return f"{int(np.array(value, np.float64).view(np.uint64)):016x}"


def from_bits(text: str) -> float:
    if len(text) == 8:
        return float(np.array(int(text, 16), np.uint32).view(np.float32))
    return float(np.array(int(text, 16), np.uint64).view(np.float64))


def record(path=None) -> Path:
    """Run the GPU's math functions (what numba compiles ``math.<name>`` to) on :func:`table_inputs` and
    write the results as bit patterns, with the device and versions, to data/results/simmath.json (or
    `path`). Needs a GPU: ``python -m lib.runtime.simmath record``."""
    import datetime
    import json

    import numba_cuda
    from numba import cuda

    from lib.mode import DATA

    device = cuda.get_current_device()  # raises where there is no GPU
    functions = {}
    for name in FUNCTIONS:
        kernel = _make_kernel(name)
        functions[name] = {}
        for precision, dtype in (("f", np.float32), ("d", np.float64)):
            args = table_inputs(name, precision)
            n = len(args)
            x = np.array([a[0] for a in args], dtype)
            if ARITY.get(name, 1) == 2:
                y = np.array([a[1] for a in args], np.int32 if name == "ldexp" else dtype)
            else:
                y = np.zeros(n, dtype)
            out = np.zeros(n, dtype)
            out2 = np.zeros(n, np.int32 if name == "frexp" else dtype)
            kernel[(n + 127) // 128, 128](x, y, out, out2)
            rows = []
            for k, a in enumerate(args):
                shown = [int(v) if (name == "ldexp" and j == 1) else _bits(v, precision) for j, v in enumerate(a)]
                result = [_bits(float(out[k]), precision)]
                if name == "frexp":
                    result.append(int(out2[k]))
                elif name == "modf":
                    result.append(_bits(float(out2[k]), precision))
                rows.append([shown, result])
            functions[name][precision] = rows
    raw = getattr(device, "name", "numba's CUDA simulator")  # the simulator's device has no name
    document = {"device": raw.decode() if isinstance(raw, bytes) else str(raw),
                "compute_capability": list(device.compute_capability), "numba_cuda": numba_cuda.__version__,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "what": "math.<name>(args) in a numba kernel: float32 ('f') and float64 ('d') arguments and "
                        "results as IEEE bit patterns (ldexp's exponent and frexp's exponent as ints)",
                "functions": functions}
    target = Path(path) if path else DATA / "results" / TABLE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=0) + "\n")
    return target


def _make_kernel(name: str):
    """A kernel applying math.<name> elementwise (compiled for the argument dtypes of the launch)."""
    from numba import cuda

    if name in ("frexp", "modf"):
        body = f"        out[i], out2[i] = math.{name}(x[i])\n"
    elif ARITY.get(name, 1) == 2:
        body = f"        out[i] = math.{name}(x[i], y[i])\n"
    else:
        body = f"        out[i] = math.{name}(x[i])\n"
    source = f"def apply(x, y, out, out2):\n    i = cuda.grid(1)\n    if i < x.size:\n{body}"
    space = {"math": math, "cuda": cuda}
    filename = f"<simmath table: {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for inspect
    exec(compile(source, filename, "exec"), space)
    return cuda.jit(space["apply"])


if __name__ == "__main__":
    if sys.argv[1:2] != ["record"] or len(sys.argv) > 3:
        sys.exit("usage: python -m lib.runtime.simmath record [FILE]   (on a GPU: records the table of its math functions)")
    print(f"wrote {record(sys.argv[2] if len(sys.argv) > 2 else None)}")
