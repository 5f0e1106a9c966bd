"""Kernel kinds: which derivative a kernel computes, and of which parameter.

========== ============ ===================================================
kind       inputs       value
========== ============ ===================================================
``fwd``    x            f(x)
``dx``     x            df/dx
``bwd``    x, g         g * df/dx (the fused backward)
``d_<p>``  x            df/dp
``bwd_<p>`` x, g        g * df/dp (before the reduction over x)
``sum_<p>`` x, g        sum of g * df/dp (the reduction of ``bwd_<p>``)
``bwdall`` x, g         ``bwd`` and every ``sum_<p>`` (the fused backward)
========== ============ ===================================================

(each kernel also takes the activation's parameters). Kinds travel as their strings
(``str(kind)``; the public objects and caches key on them); a backend that needs their
structure parses them once with :meth:`Kind.parse` (memoised). The reductions
(``sum_<p>``, ``bwdall``) write per-block or per-thread partial sums that their backend
adds up; :func:`kinds` lists the per-element kinds and, with ``sums``, ``sum_<p>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BWD_ALL", "Kind", "kinds"]

_OPS = ("fwd", "dx", "bwd", "d", "sum", "bwdall")
_NO_PARAM = ("fwd", "dx", "bwdall")
BWD_ALL = "bwdall"  # the fused backward: grad_x and every parameter's gradient in one pass
_PARSED: dict = {}


@dataclass(frozen=True)
class Kind:
    op: str  # one of fwd, dx, bwd, d, sum, bwdall
    param: str | None = None  # the parameter of d / bwd / sum kinds
    text: str = field(default="", compare=False, repr=False)

    def __post_init__(self):
        op, p = self.op, self.param
        if op not in _OPS or (p is None) != (op in _NO_PARAM) and op != "bwd" or p == "":
            raise ValueError(f"no kernel kind op={op!r} param={p!r}")
        object.__setattr__(self, "text", op if p is None else f"{op}_{p}")

    @staticmethod
    def parse(s) -> "Kind":
        """The kind named ``s`` (``"fwd"``, ``"d_alpha"`` ...); ValueError if none."""
        k = _PARSED.get(s)
        if k is None:
            if isinstance(s, Kind):
                return s
            op, sep, p = str(s).partition("_")
            try:
                k = Kind(op, p if sep else None)
            except ValueError:
                raise ValueError(f"no kernel kind {s!r}") from None
            if sep and not p:
                raise ValueError(f"no kernel kind {s!r}")
            _PARSED[s] = k
        return k

    def __str__(self) -> str:
        return self.text

    @property
    def n_data(self) -> int:
        """Array inputs: 2 (x, g) for the backward kinds, else 1 (x)."""
        return 2 if self.op in ("bwd", "sum", "bwdall") else 1

    @property
    def times_grad(self) -> bool:
        """Whether the value is multiplied by the incoming gradient g."""
        return self.op in ("bwd", "sum", "bwdall")

    @property
    def scalar(self) -> str:
        """The spec's scalar kernel it evaluates (a key of ``spec.kernels()``): ``f``,
        ``dx`` or ``d<param>``; ValueError for ``bwdall``, which evaluates all of them."""
        if self.op == "bwdall":
            raise ValueError("bwdall evaluates dx and every d<param>")
        if self.op == "fwd":
            return "f"
        if self.param is None:
            return "dx"
        return "d" + self.param

    @property
    def compact(self) -> str:
        """The kind without underscores (``bwdalpha``), as in GPU kernel names."""
        return self.text.replace("_", "")


def kinds(param_names, sums: bool = False) -> list:
    """Every kind of an activation with these parameters, in order (fwd, dx, bwd, then per
    parameter d_<p>, bwd_<p> and, with ``sums``, sum_<p>), as strings."""
    out = ["fwd", "dx", "bwd"]
    for p in param_names:
        out += [f"d_{p}", f"bwd_{p}"] + ([f"sum_{p}"] if sums else [])
    return out
