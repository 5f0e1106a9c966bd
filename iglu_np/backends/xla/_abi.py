"""XLA's typed FFI (``xla/ffi/api/c_api.h``, API 0.x) read and written from Numba code.

A handler is a C function ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)``; here it is a
Numba ``cfunc`` of signature ``intp(intp)`` (a pointer in and a pointer out: the same
registers on every 64-bit ABI XLA supports), and the structs are read as arrays of
64-bit words at the offsets below. Every struct XLA passes starts with its own
``struct_size``; the offsets are those of the header's first versions, which later minor
versions only extend (fields are appended, never moved).

A call frame carrying the metadata extension is XLA asking, at registration, which API
version the handler was built against: :func:`reply_metadata` answers it, and the
handler returns. An execute-stage call reads its buffers (:func:`buffer_data`,
:func:`buffer_size`) and its scalar attributes (:func:`attr_f64`, attributes sorted by
name) and returns 0, XLA's success.

The threaded handlers split the work over XLA's own intra-op thread pool
(``XLA_FFI_ThreadPool_Schedule``), not a second pool of their own that would compete with
XLA's threads for the same cores; :func:`schedule` and :func:`pool_threads` call the API's
function pointers, and the atomics here coordinate the tasks (``.cpu`` says how).
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "API_MAJOR",
    "API_MINOR",
    "attr_f64",
    "buffer_data",
    "buffer_size",
    "result_size",
    "c_callback",
    "error",
    "fetch_add",
    "free",
    "get_f64",
    "ieee_env",
    "load",
    "malloc",
    "pool_threads",
    "put_f64",
    "reply_metadata",
    "restore_env",
    "schedule",
    "sched_yield",
    "stack_words",
    "stage",
    "word",
    "words",
]

#: The FFI API version the handlers declare: the oldest whose structs they read (0.1
#: has every struct below; XLA accepts a handler of any minor version it knows).
API_MAJOR, API_MINOR = 0, 1

EXECUTE = 3  # XLA_FFI_ExecutionStage_EXECUTE
_METADATA = 1  # XLA_FFI_Extension_Metadata
# XLA_FFI_CallFrame: struct_size, extension_start, api, ctx, stage (int32), args {struct_size,
# extension_start, size, types, args}, rets {same, rets}, attrs {struct_size,
# extension_start, size, types, names, attrs}
_F_EXT, _F_API, _F_CTX, _F_STAGE = 1, 2, 3, 4
_F_ARGS, _F_RETS, _F_ATTRS = 5, 10, 15  # where each struct starts
# XLA_FFI_Buffer: struct_size, extension_start, dtype (int32), data, rank, dims
_B_DATA, _B_RANK, _B_DIMS = 3, 4, 5
# XLA_FFI_Api: struct_size, extension_start, api_version (3 words), internal_api, then the
# function pointers in the header's order: Error_Destroy the 3rd, ThreadPool_Schedule and
# _NumThreads the 12th and 13th (used only where the API's struct_size covers them)
_A_CREATE, _A_DESTROY, _A_SCHEDULE, _A_NUM_THREADS = 6, 8, 17, 18
_INVALID_ARGUMENT = 3  # XLA_FFI_Error_Code_INVALID_ARGUMENT
_A_WORDS = 19


@intrinsic
def _ptr(typingctx, addr):
    """The address ``addr`` (an integer) as a ``void*``."""

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(types.intp), codegen


@njit(inline="always")
def words(addr, n):
    """The ``n`` 64-bit words at ``addr`` as an int64 array (a view: writes go there)."""
    return carray(_ptr(addr), (n,), np.int64)


@njit(inline="always")
def word(addr, k):
    """The ``k``-th 64-bit word at ``addr``."""
    return carray(_ptr(addr), (k + 1,), np.int64)[k]


@njit(inline="always")
def get_f64(addr, k):
    """The ``k``-th 64-bit word at ``addr`` as a float64."""
    return carray(_ptr(addr), (k + 1,), np.float64)[k]


@njit(inline="always")
def put_f64(addr, k, v):
    """Store the float64 ``v`` as the ``k``-th 64-bit word at ``addr``."""
    carray(_ptr(addr), (k + 1,), np.float64)[k] = v


@njit(inline="always")
def _int32(addr, k):
    return carray(_ptr(addr), (k + 1,), np.int32)[k]


@njit(inline="always")
def stage(frame):
    """The call frame's execution stage; -1 for the metadata query (answered here)."""
    ext = word(frame, _F_EXT)
    if ext != 0 and _int32(ext, 2) == _METADATA:
        reply_metadata(word(ext, 3))
        return -1
    return _int32(frame, 2 * _F_STAGE)


@njit(inline="always")
def reply_metadata(md):
    """Fill ``XLA_FFI_Metadata`` at ``md``: the API version, no traits, no state type."""
    m = words(md, 6)
    m[1] = 24  # api_version.struct_size (XLA_FFI_Api_Version: 2 words and 2 int32)
    m[2] = 0  # api_version.extension_start
    v = carray(_ptr(md + 24), (2,), np.int32)
    v[0] = API_MAJOR
    v[1] = API_MINOR
    carray(_ptr(md + 32), (1,), np.uint32)[0] = 0  # traits
    m[5] = 0  # state_type_id: XLA_FFI_UNKNOWN_TYPE_ID


@njit(inline="always")
def _buffer(frame, which, i):
    return word(word(frame, which + 4), i)  # args.args[i] / rets.rets[i]


@njit(inline="always")
def buffer_data(frame, i, ret):
    """The data pointer of argument ``i`` (``ret`` False) or result ``i`` (True)."""
    return word(_buffer(frame, _F_RETS if ret else _F_ARGS, i), _B_DATA)


@njit(inline="always")
def buffer_size(frame, i):
    """The element count of argument ``i``."""
    return _size(_buffer(frame, _F_ARGS, i))


@njit(inline="always")
def result_size(frame, i):
    """The element count of result ``i``."""
    return _size(_buffer(frame, _F_RETS, i))


@njit(inline="always")
def _size(b):
    rank = word(b, _B_RANK)
    dims = word(b, _B_DIMS)
    n = 1
    for k in range(rank):
        n *= word(dims, k)
    return n


@njit(inline="always")
def attr_f64(frame, i):
    """Scalar attribute ``i`` (in name order), a float64 (``XLA_FFI_Scalar``: dtype, value
    pointer)."""
    scalar = word(word(frame, _F_ATTRS + 5), i)
    return carray(_ptr(word(scalar, 1)), (1,), np.float64)[0]


# --------------------------------------------------------------------------- float env
# XLA runs its CPU code with subnormals flushed to zero (x86's MXCSR FTZ and DAZ bits,
# AArch64's FPCR.FZ); the kernels' accuracy includes subnormal inputs and results, so a
# handler and its tasks clear those bits while they compute and restore XLA's after.
_ARCH = platform.machine().lower()


@intrinsic
def ieee_env(typingctx):
    """Clear flush-to-zero (and denormals-are-zero); the previous control word."""

    def codegen(context, builder, sig, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        mod = builder.module
        if _ARCH in ("x86_64", "amd64"):
            p = cgutils.alloca_once(builder, i32)
            i8p = builder.bitcast(p, ir.IntType(8).as_pointer())
            st = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.VoidType(), [i8p.type]), "llvm.x86.sse.stmxcsr"
            )
            ld = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.VoidType(), [i8p.type]), "llvm.x86.sse.ldmxcsr"
            )
            builder.call(st, [i8p])
            old = builder.load(p)
            builder.store(builder.and_(old, ir.Constant(i32, ~0x8040 & 0xFFFFFFFF)), p)
            builder.call(ld, [i8p])
            return builder.zext(old, i64)
        if _ARCH in ("aarch64", "arm64"):
            get = cgutils.get_or_insert_function(
                mod, ir.FunctionType(i64, []), "llvm.aarch64.get.fpcr"
            )
            put = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.VoidType(), [i64]), "llvm.aarch64.set.fpcr"
            )
            old = builder.call(get, [])
            builder.call(put, [builder.and_(old, ir.Constant(i64, ~(1 << 24)))])
            return old
        return ir.Constant(i64, 0)

    return types.int64(), codegen


@intrinsic
def restore_env(typingctx, old):
    """Restore the control word :func:`ieee_env` returned."""

    def codegen(context, builder, sig, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        mod = builder.module
        if _ARCH in ("x86_64", "amd64"):
            p = cgutils.alloca_once(builder, i32)
            builder.store(builder.trunc(args[0], i32), p)
            i8p = builder.bitcast(p, ir.IntType(8).as_pointer())
            ld = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.VoidType(), [i8p.type]), "llvm.x86.sse.ldmxcsr"
            )
            builder.call(ld, [i8p])
        elif _ARCH in ("aarch64", "arm64"):
            put = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.VoidType(), [i64]), "llvm.aarch64.set.fpcr"
            )
            builder.call(put, [args[0]])
        return context.get_dummy_value()

    return types.none(types.int64), codegen


# --------------------------------------------------------------------------- atomics
@intrinsic
def fetch_add(typingctx, addr, v):
    """Atomically add ``v`` to the int64 at ``addr``; the value before."""

    def codegen(context, builder, sig, args):
        p = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.atomic_rmw("add", p, args[1], "seq_cst")

    return types.int64(types.intp, types.int64), codegen


@intrinsic
def load(typingctx, addr):
    """The int64 at ``addr``, read atomically (acquire: a spin loop re-reads it)."""

    def codegen(context, builder, sig, args):
        p = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load_atomic(p, "acquire", 8)

    return types.int64(types.intp), codegen


@intrinsic
def _call1(typingctx, fn, a):
    """``fn(a)``: a C function ``void* (void*)`` at the address ``fn``, as integers."""

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        f = builder.inttoptr(args[0], ir.FunctionType(i64, [i64]).as_pointer())
        return builder.call(f, [args[1]])

    return types.intp(types.intp, types.intp), codegen


# --------------------------------------------------------------------------- C library
# Declared by name and resolved by the JIT linker against the process's C library, not
# called through ctypes pointers: a handler holds no address of this process, so Numba's
# on-disk cache can keep it.
def _libc_fn(builder, name, ret, args):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args), name)


@intrinsic
def malloc(typingctx, nbytes):
    """C's ``malloc(nbytes)`` as an integer address (0: no memory)."""

    def codegen(context, builder, sig, args):
        fn = _libc_fn(builder, "malloc", cgutils.voidptr_t, [ir.IntType(64)])
        return builder.ptrtoint(builder.call(fn, [args[0]]), ir.IntType(64))

    return types.intp(types.intp), codegen


@intrinsic
def free(typingctx, addr):
    """C's ``free`` of an address :func:`malloc` gave."""

    def codegen(context, builder, sig, args):
        fn = _libc_fn(builder, "free", ir.VoidType(), [cgutils.voidptr_t])
        builder.call(fn, [builder.inttoptr(args[0], cgutils.voidptr_t)])
        return context.get_dummy_value()

    return types.none(types.intp), codegen


@intrinsic
def sched_yield(typingctx):
    """POSIX ``sched_yield()``: a spinning thread lets the pool's others run."""

    def codegen(context, builder, sig, args):
        return builder.call(_libc_fn(builder, "sched_yield", ir.IntType(32), []), [])

    return types.int32(), codegen


@intrinsic
def stack_words(typingctx, n):
    """The address of ``n`` (a literal) 64-bit words on the calling function's stack."""
    if not isinstance(n, types.IntegerLiteral):
        return None
    size = n.literal_value

    def codegen(context, builder, sig, args):
        buf = cgutils.alloca_once(builder, ir.ArrayType(ir.IntType(64), size))
        return builder.ptrtoint(buf, ir.IntType(64))

    return types.intp(n), codegen


@intrinsic
def c_callback(typingctx, task):
    """The address of a C function ``void f(void* d)`` that runs the compiled function
    ``task(d)`` (an ``njit`` dispatcher of ``(intp,)``): a function of the caller's own
    object code, so a cached handler and its tasks load together, linked."""
    if not isinstance(task, types.Dispatcher):
        return None
    disp = task.dispatcher
    targ = (types.intp,)

    def codegen(context, builder, sig, args):
        mod = builder.module
        name = f"iglu_np_task_{disp.py_func.__name__}"
        fn = mod.globals.get(name)
        if fn is None:
            fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), name=name)
            fn.linkage = "internal"
            b = ir.IRBuilder(fn.append_basic_block())
            cres = context.compile_subroutine(b, lambda d: disp(d), types.void(*targ))
            callee = cgutils.get_or_insert_function(
                mod,
                context.call_conv.get_function_type(types.void, targ),
                cres.fndesc.mangled_name,
            )
            # the task's status is dropped: a task raises nothing (it only computes)
            context.call_conv.call_function(b, callee, types.void, targ, [fn.args[0]])
            b.ret_void()
        return builder.ptrtoint(fn, ir.IntType(64))

    return types.intp(task), codegen


@njit(inline="always")
def _api_fn(frame, k):
    api = word(frame, _F_API)
    if word(api, 0) < 8 * _A_WORDS:
        return 0
    return word(api, k)


@njit
def _destroy(frame, err):
    # XLA_FFI_Error_Destroy takes {struct_size, extension_start, error}
    a = np.empty(3, np.int64)
    a[0], a[1], a[2] = 24, 0, err
    _call1(word(word(frame, _F_API), _A_DESTROY), a.ctypes.data)


@njit
def error(frame, message):
    """An ``XLA_FFI_Error`` (invalid argument) carrying ``message``, a NUL-terminated
    uint8 array; the handler returns it and XLA raises it in the caller."""
    a = np.empty(4, np.int64)
    a[0], a[1], a[2], a[3] = 32, 0, message.ctypes.data, _INVALID_ARGUMENT
    return _call1(word(word(frame, _F_API), _A_CREATE), a.ctypes.data)


def message(text: str) -> np.ndarray:
    """``text`` as the NUL-terminated bytes :func:`error` takes."""
    return np.frombuffer(text.encode() + b"\0", dtype=np.uint8).copy()


@njit
def pool_threads(frame):
    """XLA's intra-op thread count for this call (0 where the API has no pool)."""
    fn = _api_fn(frame, _A_NUM_THREADS)
    if fn == 0:
        return 0
    n = np.zeros(1, np.int64)
    a = np.empty(4, np.int64)
    a[0], a[1], a[2], a[3] = 32, 0, word(frame, _F_CTX), n.ctypes.data
    err = _call1(fn, a.ctypes.data)
    if err != 0:
        _destroy(frame, err)
        return 0
    return n[0]


@njit
def schedule(frame, task, data):
    """Schedule the C function ``task(data)`` on XLA's thread pool; False where it cannot
    be (the caller then does the work itself)."""
    fn = _api_fn(frame, _A_SCHEDULE)
    if fn == 0:
        return False
    a = np.empty(5, np.int64)
    a[0], a[1], a[2], a[3], a[4] = 40, 0, word(frame, _F_CTX), task, data
    err = _call1(fn, a.ctypes.data)
    if err != 0:
        _destroy(frame, err)
        return False
    return True
