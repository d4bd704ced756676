"""The book's commands, outside the library (they drive it and may import ``kernels/``):
``python -m tools.record`` (``make record``), ``python -m tools.student`` (``make student``),
``python -m tools.notebooks`` (execute the chapters) and ``python -m tools.simbench`` (the simulator's speed)."""
