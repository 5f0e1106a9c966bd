"""C++ generated from the Python kernels: one source for the CPU, Numba CUDA and CuPy.

The activation kernels (and the helpers they call, down to the CPU's own elementary
functions in :mod:`iglu_np._vmath`) are written in a small subset of Python that Numba
compiles. This module translates that subset, function by function, into C++ templates
that compile on the host (g++) and on the device (NVRTC), so CuPy computes *the same
operations* as the Numba CPU ufuncs: the same polynomials, range reductions and stable
forms, with no libm or libdevice in between. Compiled without FMA contraction (as Numba
compiles on the CPU) the two agree to the last bit, subnormal results included; CUDA's
own ``expf`` is built on ``ex2.approx.ftz`` and flushed such results to zero.

The subset (what the kernels use; anything else is a :class:`TranslationError` naming the
function and line):

* assignments (also tuple unpacking of a helper's returned pair), ``+= -= *= /=``,
  ``if``/``elif``/``else``, ``return`` (a value or a tuple), docstrings, ``pass``;
* ``a if c else b``, ``and``/``or``/``not``, comparisons (chained too), ``+ - * / >> << & |``,
  unary ``-``;
* ``T = type(x)``, ``T(c)``, ``type(x)(c)``, ``abs``, ``max``/``min`` (two arguments, with
  Numba's select semantics), ``math.<f>``, calls of other kernels, ``horner(v, COEFFS)``
  with a tuple of module constants, module-level numeric constants (inlined as literals);
* ``numba.int32``/``numba.float64`` casts (kernels name numba through the stand-in
  ``iglu_np._math.NUMBA``; :mod:`iglu_np._vmath` directly), and there the bit-cast
  intrinsics ``_bits``/``_from_bits``.

Every function becomes ``template <class A0, ...> IGLU_NP_HOST_DEVICE auto f(A0 x, ...)``
(types are deduced, as Numba types them at each call), locals become ``auto``; a local
first assigned inside a branch is declared (``decltype`` of that first value) before the
statement that holds the branch. A test ``is_f32(x)`` becomes a compile-time
``sizeof(x) == 4`` (``if constexpr`` as a statement), so each precision compiles only its
own constants.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import types
from functools import lru_cache

from ..._spec import is_kernel

__all__ = ["TranslationError", "translate", "function_name"]


class TranslationError(ValueError):
    """A kernel uses Python the C++ translator does not know."""


# ``math.<name>`` that the CPU computes with iglu_np._vmath (when enabled): translated from
# the same Python; the rest map to C++ functions that are exact (IEEE) on host and device.
_MATH_CXX = {
    "sqrt": "sqrt",
    "copysign": "copysign",
    "fabs": "fabs",
    "floor": "floor",
    "ceil": "ceil",
    "isinf": "isinf",
    "isnan": "isnan",
    "isfinite": "isfinite",
}
_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.RShift: ">>",
    ast.LShift: "<<",
    ast.BitAnd: "&",
    ast.BitOr: "|",
}
# the fields of iglu_np::tup2 .. tup8, a returned tuple's values in order
_FIELDS = "abcdefgh"
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_F32_TESTS = ("is_f32", "_f32")  # names of the float32 predicate (iglu_np._math, _vmath)


def _vmath():
    from ... import _vmath

    return _vmath


def _pyfunc(obj):
    """The plain Python function behind a kernel or a Numba dispatcher, else None."""
    if isinstance(obj, types.FunctionType):
        return obj
    py = getattr(obj, "py_func", None)
    return py if isinstance(py, types.FunctionType) else None


def function_name(fn) -> str:
    """The C++ name of a translated function: module and function, so names never clash."""
    mod = fn.__module__.rsplit(".", 1)[-1].lstrip("_")
    return f"k_{mod}__{fn.__name__.lstrip('_')}"


def _is_number(v) -> bool:
    import numpy as np

    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_)
    )


def literal(v) -> str:
    """A C++ literal of a Python or numpy number (doubles exactly as repr prints them; a
    numpy float32 stays float32, as Numba types it)."""
    import numpy as np

    if isinstance(v, np.float32):
        return f"float({literal(float(v))})"
    if isinstance(v, np.floating):
        v = float(v)
    elif isinstance(v, np.integer):
        v = int(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v}LL" if not -(2**31) <= v < 2**31 else str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "iglu_np::nan_d()"
        if math.isinf(v):
            return "iglu_np::inf_d()" if v > 0 else "(-iglu_np::inf_d())"
        r = repr(v)
        return r if ("." in r or "e" in r) else r + ".0"
    raise TypeError(type(v))


class _Func:
    """Translation of one Python function into a C++ function template."""

    def __init__(self, fn, resolve):
        self.fn = fn
        self.resolve = resolve  # callable(fn) -> C++ name, queues the dependency
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
        self.node = tree.body[0]
        self.line0 = fn.__code__.co_firstlineno - 1
        self.g = fn.__globals__
        self.args = [a.arg for a in self.node.args.args]
        self.declared = set(self.args)
        self.tuples = {}  # locals holding a (selected) tuple of coefficients
        self.tmp = 0

    # ------------------------------------------------------------------ errors
    def err(self, node, what):
        line = self.line0 + getattr(node, "lineno", 1)
        return TranslationError(
            f"{self.fn.__module__}.{self.fn.__name__} (line {line}): {what}: "
            f"{ast.unparse(node) if isinstance(node, ast.AST) else node}"
        )

    # ------------------------------------------------------------------ globals
    def global_value(self, name, node):
        if name in self.g:
            return self.g[name]
        import builtins

        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.err(node, f"unknown name {name!r}")

    def const_value(self, node):
        """The value of a module constant (Name, math.pi, ...), or raise."""
        if isinstance(node, ast.Name):
            v = self.global_value(node.id, node)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = self.global_value(node.value.id, node)
            v = getattr(base, node.attr)
        else:
            raise self.err(node, "not a constant")
        if _is_number(v):
            return v
        if isinstance(v, tuple) and all(_is_number(c) for c in v):
            return v
        raise self.err(node, f"global {type(v).__name__} is not a numeric constant")

    # ------------------------------------------------------------------ expressions
    def is_f32_test(self, node):
        """``is_f32(x)`` / ``_f32(x)``: C++ ``(sizeof(x) == 4)`` (a constant expression)."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _F32_TESTS
            and len(node.args) == 1
        ):
            return f"(sizeof({self.expr(node.args[0])}) == 4)"
        return None

    def expr(self, node) -> str:
        m = getattr(self, "e_" + type(node).__name__, None)
        if m is None:
            raise self.err(node, f"unsupported expression {type(node).__name__}")
        return m(node)

    def e_Constant(self, node):
        if isinstance(node.value, (int, float)):
            return literal(node.value)
        raise self.err(node, "unsupported constant")

    def e_Name(self, node):
        if node.id in self.declared:
            return node.id
        v = self.const_value(node)
        if isinstance(v, tuple):
            raise self.err(node, "a tuple constant is only allowed as horner's coefficients")
        return literal(v)

    def e_Attribute(self, node):
        v = self.const_value(node)
        if isinstance(v, tuple):
            raise self.err(node, "a tuple constant is only allowed as horner's coefficients")
        return literal(v)

    def e_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, f"unsupported operator {type(node.op).__name__}")
        return f"({self.expr(node.left)} {op} {self.expr(node.right)})"

    def e_UnaryOp(self, node):
        if isinstance(node.op, ast.USub):
            return f"(-{self.expr(node.operand)})"
        if isinstance(node.op, ast.Not):
            return f"(!{self.expr(node.operand)})"
        if isinstance(node.op, ast.UAdd):
            return self.expr(node.operand)
        raise self.err(node, "unsupported unary operator")

    def e_BoolOp(self, node):
        op = " && " if isinstance(node.op, ast.And) else " || "
        return "(" + op.join(self.expr(v) for v in node.values) + ")"

    def e_Compare(self, node):
        parts, left = [], node.left
        for op, right in zip(node.ops, node.comparators):
            c = _CMPOPS.get(type(op))
            if c is None:
                raise self.err(node, "unsupported comparison")
            parts.append(f"({self.expr(left)} {c} {self.expr(right)})")
            left = right
        return parts[0] if len(parts) == 1 else "(" + " && ".join(parts) + ")"

    def e_IfExp(self, node):
        test = self.is_f32_test(node.test) or self.expr(node.test)
        return f"({test} ? {self.expr(node.body)} : {self.expr(node.orelse)})"

    def e_Tuple(self, node):
        items = ", ".join(self.expr(e) for e in node.elts)
        return f"iglu_np::make_tup({items})"

    def e_Call(self, node):
        if node.keywords:
            raise self.err(node, "keyword arguments are not supported")
        f32 = self.is_f32_test(node)
        if f32:
            return f32
        func = node.func
        args = node.args
        # T(c) / type(x)(c): a cast to the kernel's type
        if isinstance(func, ast.Name) and func.id in self.declared:
            return f"{func.id}({', '.join(self.expr(a) for a in args)})"
        if (
            isinstance(func, ast.Call)
            and isinstance(func.func, ast.Name)
            and func.func.id == "type"
        ):
            return f"decltype({self.expr(func.args[0])})({self.expr(args[0])})"
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = self.global_value(func.value.id, func)
            if base is math:
                return self.math_call(node, func.attr, args)
            if getattr(base, "__name__", "") == "numba" and func.attr in (
                "int32",
                "int64",
                "float32",
                "float64",
            ):
                ct = {
                    "int32": "int",
                    "int64": "long long",
                    "float32": "float",
                    "float64": "double",
                }[func.attr]
                return f"(({ct})({self.expr(args[0])}))"
            raise self.err(node, "unsupported attribute call")
        if not isinstance(func, ast.Name):
            raise self.err(node, "unsupported call")
        name = func.id
        obj = self.global_value(name, func)
        import builtins

        if obj is builtins.abs:
            return f"iglu_np::py_abs({self.expr(args[0])})"
        if obj is builtins.max or obj is builtins.min:
            if len(args) != 2:
                raise self.err(node, "max/min take two arguments here")
            w = "py_max" if obj is builtins.max else "py_min"
            return f"iglu_np::{w}({self.expr(args[0])}, {self.expr(args[1])})"
        if self.is_fma(obj):
            if len(args) != 3:
                raise self.err(node, "fma(a, b, c)")
            return f"iglu_np::fma_({', '.join(self.expr(a) for a in args)})"
        if self.is_horner(obj):
            if len(args) != 2:
                raise self.err(node, "horner(v, COEFFS)")
            coeffs = self.tuple_expr(args[1])
            if coeffs is None:
                raise self.err(
                    node, "horner's coefficients must be a tuple constant (or a select of them)"
                )
            n = self.tuple_len(coeffs, node)
            cs = ", ".join(self.tuple_item(coeffs, k) for k in range(n))
            return f"iglu_np::horner({self.expr(args[0])}, {cs})"
        vm = _vmath()
        from ... import _math

        for k in vm.KERNELS:  # what the CPU computes for these kernels
            if obj is getattr(_math, k):
                obj = getattr(vm, k)
        if obj is getattr(vm, "_bits", None):
            return f"iglu_np::bits({self.expr(args[0])})"
        if obj is getattr(vm, "_from_bits", None):
            return f"iglu_np::from_bits({self.expr(args[0])}, {self.expr(args[1])})"
        py = _pyfunc(obj)
        if py is None or not (is_kernel(obj) or py.__module__ == vm.__name__):
            raise self.err(node, f"{name!r} is neither a kernel nor a known helper")
        return f"{self.resolve(py)}({', '.join(self.expr(a) for a in args)})"

    # Coefficient tuples: a module constant, or selects of them (``A if c else B``) kept
    # symbolic and expanded per coefficient at the horner call.
    def tuple_expr(self, node):
        if isinstance(node, ast.Name) and node.id in self.tuples:
            return self.tuples[node.id]
        if isinstance(node, ast.IfExp):
            a, b = self.tuple_expr(node.body), self.tuple_expr(node.orelse)
            if a is None or b is None:
                return None
            test = self.is_f32_test(node.test) or self.expr(node.test)
            return ("sel", test, a, b)
        if isinstance(node, (ast.Name, ast.Attribute)) and not (
            isinstance(node, ast.Name) and node.id in self.declared
        ):
            try:
                v = self.const_value(node)
            except TranslationError:
                return None
            return v if isinstance(v, tuple) and v else None
        return None

    def tuple_len(self, t, node):
        if isinstance(t, tuple) and t and t[0] == "sel" and isinstance(t[1], str):
            n, m = self.tuple_len(t[2], node), self.tuple_len(t[3], node)
            if n != m:
                raise self.err(node, "selected coefficient tuples differ in length")
            return n
        return len(t)

    def tuple_item(self, t, k):
        if isinstance(t, tuple) and t and t[0] == "sel" and isinstance(t[1], str):
            return f"({t[1]} ? {self.tuple_item(t[2], k)} : {self.tuple_item(t[3], k)})"
        return literal(float(t[k]))  # horner casts each coefficient: T(c[k])

    def is_fma(self, obj):
        from ... import _math

        return obj is _math.fma or obj is getattr(_vmath(), "_fma", None)

    def is_horner(self, obj):
        from ... import _math

        return obj is _math.horner or obj is _vmath().horner

    def math_call(self, node, name, args):
        a = ", ".join(self.expr(x) for x in args)
        if name in _vmath().OVERRIDDEN:
            return f"{self.resolve(getattr(_vmath(), name).py_func)}({a})"
        cx = _MATH_CXX.get(name)
        if cx is None:
            raise self.err(node, f"math.{name} has no C++ counterpart here")
        return f"{cx}({a})"

    # ------------------------------------------------------------------ statements
    def assigned_names(self, stmts):
        """Names assigned anywhere in ``stmts``, in order of first assignment, with the
        C++ expression of that first value (for ``decltype``)."""
        out = {}

        def visit(st):
            if isinstance(st, ast.Assign):
                tgt = st.targets[0]
                if isinstance(tgt, ast.Name):
                    out.setdefault(tgt.id, ("val", st.value))
                elif isinstance(tgt, ast.Tuple):
                    for k, e in enumerate(tgt.elts):
                        out.setdefault(e.id, ("item", st.value, k, len(tgt.elts)))
            elif isinstance(st, ast.If):
                for s in st.body + st.orelse:
                    visit(s)

        for s in stmts:
            visit(s)
        return out

    def hoist(self, st, ind):
        """Declarations, before ``st``, of the locals first assigned inside its branches."""
        if not isinstance(st, ast.If):
            return []
        lines = []
        for name, how in self.assigned_names([st]).items():
            if name in self.declared:
                continue
            if how[0] == "val":
                if self.tuple_expr(how[1]) is not None:
                    continue  # a coefficient tuple: kept symbolic, never a C++ local
                ty = f"IGLU_NP_TYPE({self.expr_tolerant(how[1])})"
            else:
                _, value, k, n = how
                if isinstance(value, ast.Tuple):
                    ty = f"IGLU_NP_TYPE({self.expr_tolerant(value.elts[k])})"
                else:
                    ty = f"IGLU_NP_TYPE({self.expr_tolerant(value)}.{_FIELDS[k]})"
            lines.append(f"{ind}[[maybe_unused]] {ty} {name}{{}};")
            self.declared.add(name)
        return lines

    def expr_tolerant(self, node):
        try:
            return self.expr(node)
        except TranslationError as e:
            raise self.err(
                node, f"cannot declare a local first assigned in a branch ({e})"
            ) from None

    def body(self, stmts, ind):
        lines = []
        stmts = list(stmts)
        for i, st in enumerate(stmts):
            if (
                isinstance(st, ast.If)
                and not st.orelse
                and i + 1 < len(stmts)
                and self.f32_test(st.test)
                and isinstance(st.body[-1], ast.Return)
            ):
                # ``if is_f32(x): ... return`` then the float64 code: the rest becomes the
                # else of the ``if constexpr``, so each precision instantiates only its own
                # code (no float64 shifts or constants checked in a float32 kernel).
                st = ast.If(test=st.test, body=st.body, orelse=stmts[i + 1 :])
                ast.copy_location(st, stmts[i])
                lines += self.hoist(st, ind)
                lines += self.stmt(st, ind)
                return lines
            lines += self.hoist(st, ind)
            lines += self.stmt(st, ind)
        return lines

    def stmt(self, st, ind):
        if (
            isinstance(st, ast.Expr)
            and isinstance(st.value, ast.Constant)
            and isinstance(st.value.value, str)
        ):
            return []  # docstring
        if isinstance(st, ast.Pass):
            return []
        if isinstance(st, ast.Assign):
            return self.s_assign(st, ind)
        if isinstance(st, ast.AugAssign):
            op = _BINOPS.get(type(st.op))
            if (
                op is None
                or not isinstance(st.target, ast.Name)
                or st.target.id not in self.declared
            ):
                raise self.err(st, "unsupported augmented assignment")
            return [f"{ind}{st.target.id} {op}= {self.expr(st.value)};"]
        if isinstance(st, ast.Return):
            if st.value is None:
                raise self.err(st, "a kernel returns a value")
            return [f"{ind}return {self.expr(st.value)};"]
        if isinstance(st, ast.If):
            return self.s_if(st, ind)
        raise self.err(st, f"unsupported statement {type(st).__name__}")

    def f32_test(self, test):
        """C++ constant expression of an ``is_f32(x)`` or ``not is_f32(x)`` test, else None."""
        f32 = self.is_f32_test(test)
        if f32 is None and isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.is_f32_test(test.operand)
            f32 = f"(!{inner})" if inner else None
        return f32

    def s_if(self, st, ind, kw="if"):
        f32 = self.f32_test(st.test)
        head = f"{kw} constexpr ({f32})" if f32 else f"{kw} ({self.expr(st.test)})"
        lines = [f"{ind}{head} {{"]
        lines += self.body(st.body, ind + "  ")
        if st.orelse:
            if len(st.orelse) == 1 and isinstance(st.orelse[0], ast.If) and not f32:
                sub = self.s_if(st.orelse[0], ind, "if")
                lines.append(f"{ind}}} else {{")
                lines += ["  " + s for s in sub]
                lines.append(f"{ind}}}")
                return lines
            lines.append(f"{ind}}} else {{")
            lines += self.body(st.orelse, ind + "  ")
        lines.append(f"{ind}}}")
        return lines

    def s_assign(self, st, ind):
        if len(st.targets) != 1:
            raise self.err(st, "chained assignment")
        tgt = st.targets[0]
        if isinstance(tgt, ast.Name):
            # T = type(x): the kernel's float type
            v = st.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "type":
                if tgt.id in self.declared:
                    raise self.err(st, "type alias assigned twice")
                self.declared.add(tgt.id)
                return [f"{ind}using {tgt.id} [[maybe_unused]] = decltype({self.expr(v.args[0])});"]
            tup = self.tuple_expr(v)
            if tup is not None:
                if tgt.id in self.declared:
                    raise self.err(st, "a coefficient tuple cannot be assigned to a number")
                self.tuples[tgt.id] = tup
                return []
            rhs = self.expr(v)
            if tgt.id in self.declared:
                return [f"{ind}{tgt.id} = {rhs};"]
            self.declared.add(tgt.id)
            return [f"{ind}[[maybe_unused]] auto {tgt.id} = {rhs};"]
        if isinstance(tgt, ast.Tuple) and all(isinstance(e, ast.Name) for e in tgt.elts):
            names = [e.id for e in tgt.elts]
            if len(names) > 8:
                raise self.err(st, "at most eight values unpack")
            self.tmp += 1
            t = f"_t{self.tmp}"
            lines = [f"{ind}auto {t} = {self.expr(st.value)};"]
            for k, n in enumerate(names):
                item = f"{t}.{_FIELDS[k]}"
                if n in self.declared:
                    lines.append(f"{ind}{n} = {item};")
                else:
                    self.declared.add(n)
                    lines.append(f"{ind}[[maybe_unused]] auto {n} = {item};")
            return lines
        raise self.err(st, "unsupported assignment target")

    # ------------------------------------------------------------------ whole function
    def translate(self) -> str:
        node = self.node
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
            raise self.err(node, "kernels take plain positional arguments")
        n = len(self.args)
        tpl = ", ".join(f"class A{k}" for k in range(n))
        # [[maybe_unused]]: a kernel may ignore an argument (a derivative free of x, say)
        sig = ", ".join(f"[[maybe_unused]] A{k} {name}" for k, name in enumerate(self.args))
        lines = [
            f"// {self.fn.__module__}.{self.fn.__qualname__}",
            f"template <{tpl}>" if n else "",
            f"IGLU_NP_HOST_DEVICE auto {function_name(self.fn)}({sig}) {{",
        ]
        lines = [ln for ln in lines if ln]
        lines += self.body(node.body, "  ")
        lines.append("}")
        return "\n".join(lines)


@lru_cache(maxsize=None)
def _translated(fn) -> tuple:
    """(C++ text, dependencies in call order) of one function."""
    deps = []

    def resolve(callee):
        if callee is not fn and callee not in deps:
            deps.append(callee)
        return function_name(callee)

    return _Func(fn, resolve).translate(), tuple(deps)


def translate(fns) -> str:
    """C++ for ``fns`` and everything they call, callees first, each function once."""
    order, seen = [], set()

    def visit(fn, stack=()):
        if fn in seen:
            return
        if fn in stack:
            raise TranslationError(f"{fn.__module__}.{fn.__name__}: recursion is not supported")
        _, deps = _translated(fn)
        for d in deps:
            visit(d, stack + (fn,))
        seen.add(fn)
        order.append(fn)

    for fn in fns:
        visit(fn)
    return "\n\n".join(_translated(fn)[0] for fn in order)
