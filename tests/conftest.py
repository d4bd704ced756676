"""`import lib` before any test module imports numba.cuda: lib must choose GPU or simulator first."""
import lib  # noqa: F401
