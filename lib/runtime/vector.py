"""16-byte loads and stores of four float32, defined once for every chapter: on a GPU one ``LDG.E.128`` /
``STG.E.128`` (an LLVM ``<4 x float>`` access with 16-byte alignment, which NVVM emits as
``ld.global.v4.f32``), on the simulator four plain reads or writes.

numba only knows that a float32 array is 4-byte aligned, so it never merges four neighbouring loads into one:
these functions state the 16-byte alignment themselves. The caller guarantees it (a fresh device array
starts on a 256-byte boundary; the launchers check with :func:`data_address`), and a row of a 2-D array is
16-byte aligned when its length is a multiple of 4.

* ``load_float4(array, i)`` -> ``array[4i : 4i + 4]`` of a 1-D float32 array (global or shared);
* ``store_float4(array, i, v0, v1, v2, v3)``: ``array[4i : 4i + 4] = v0, v1, v2, v3``;
* ``load_float4_2d(array, row, col)`` -> ``array[row, col : col + 4]`` of a C-contiguous 2-D float32 array;
* ``data_address(array)``: where an array's data starts, to check the alignment on the host;
* ``SMEM_ALIGN``: the ``alignment=`` for a shared array read this way (the simulator takes none, and needs
  none: it reads element by element).
"""
from __future__ import annotations

from lib.mode import SIMULATOR

SMEM_ALIGN = None if SIMULATOR else 16


def data_address(array) -> int:
    """Where an array's data starts (a device address on a GPU, a host one on the simulator)."""
    interface = getattr(array, "__cuda_array_interface__", None) or array.__array_interface__
    return interface["data"][0]


if SIMULATOR:
    def load_float4(array, i):
        """array[4i], array[4i+1], array[4i+2], array[4i+3] (simulator: four reads)."""
        return array[4 * i], array[4 * i + 1], array[4 * i + 2], array[4 * i + 3]

    def store_float4(array, i, v0, v1, v2, v3):
        """array[4i : 4i + 4] = v0, v1, v2, v3 (simulator: four writes)."""
        array[4 * i], array[4 * i + 1], array[4 * i + 2], array[4 * i + 3] = v0, v1, v2, v3

    def load_float4_2d(array, row, col):
        """array[row, col:col + 4] as four float32 (simulator: four scalar reads)."""
        return array[row, col], array[row, col + 1], array[row, col + 2], array[row, col + 3]
else:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    _FLOAT4 = ir.VectorType(ir.FloatType(), 4)

    def _float4_pointer(context, builder, array_type, array, index):
        data = context.make_array(array_type)(context, builder, value=array).data
        element = builder.gep(data, [builder.mul(index, ir.Constant(index.type, 4))])
        return builder.bitcast(element, _FLOAT4.as_pointer())

    def _is_float32_vector(array):
        return isinstance(array, types.Array) and array.dtype == types.float32 and array.ndim == 1

    @intrinsic
    def load_float4(typingctx, array, index):
        """array[4i : 4i + 4] in one 16-byte load (array 16-byte aligned)."""
        if not (_is_float32_vector(array) and isinstance(index, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            index = context.cast(builder, args[1], sig.args[1], types.intp)
            vector = builder.load(_float4_pointer(context, builder, sig.args[0], args[0], index), align=16)
            result = ir.Constant(ir.ArrayType(ir.FloatType(), 4), None)
            for k in range(4):
                lane = builder.extract_element(vector, ir.Constant(ir.IntType(32), k))
                result = builder.insert_value(result, lane, k)
            return result
        return types.UniTuple(types.float32, 4)(array, index), codegen

    @intrinsic
    def store_float4(typingctx, array, index, v0, v1, v2, v3):
        """array[4i : 4i + 4] = v0, v1, v2, v3 in one 16-byte store (array 16-byte aligned)."""
        if not (_is_float32_vector(array) and isinstance(index, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            index = context.cast(builder, args[1], sig.args[1], types.intp)
            vector = ir.Constant(_FLOAT4, None)
            for k in range(4):
                value = context.cast(builder, args[2 + k], sig.args[2 + k], types.float32)
                vector = builder.insert_element(vector, value, ir.Constant(ir.IntType(32), k))
            builder.store(vector, _float4_pointer(context, builder, sig.args[0], args[0], index), align=16)
        return types.void(array, index, v0, v1, v2, v3), codegen

    @intrinsic
    def load_float4_2d(typingctx, array, row, col):
        """array[row, col:col + 4] as four float32 in one 16-byte load: the address must be 16-byte aligned
        (a C-contiguous float32 matrix whose row length is a multiple of 4, col a multiple of 4)."""
        signature = types.UniTuple(types.float32, 4)(array, row, col)

        def codegen(context, builder, sig, args):
            array_type = sig.args[0]
            ary, r, c = args
            ary = context.make_array(array_type)(context, builder, value=ary)
            r = context.cast(builder, r, sig.args[1], types.intp)
            c = context.cast(builder, c, sig.args[2], types.intp)
            ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [r, c], wraparound=False)
            loaded = builder.load(builder.bitcast(ptr, _FLOAT4.as_pointer(addrspace=ptr.type.addrspace)), align=16)
            parts = [builder.extract_element(loaded, ir.Constant(ir.IntType(32), i)) for i in range(4)]
            return context.make_tuple(builder, sig.return_type, parts)

        return signature, codegen
