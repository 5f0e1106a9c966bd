"""Python source of the CPU gated loops' module for one spec: ``act(gate) * up`` and its
backward, fused, over the operands' own memory.

A call's gate and up elements sit in rows (:mod:`.gated` computes the geometry from the
layout): element ``j`` of row ``r`` of the gate is ``xg[goff + r * rs + j]`` and of up
``xu[uoff + r * rs + j]``, or for pairs along the last axis (:data:`LAYOUTS`) the two
elements of pair ``r * rs / 2 + j``; the output and grad_out are C-contiguous ``R x C``,
and the input gradients go to the gate's and up's own positions of ``og`` / ``ou``. Work is split into tasks of a row
and at most :data:`GLU_BLOCK` columns; each task slices its operands from 0 so that the
element loop is a plain loop over 1-d views (LLVM vectorises it).

Where the spec has bulk kernels, a task runs them (the same bits inside the bulk domain)
checking the domain as it goes, and the exact kernels again on a task with an element
outside.

Pure text from the spec: :mod:`.gated` executes it with the scalar kernels bound as
globals and compiles the functions with Numba.
"""

from __future__ import annotations


def _args(spec) -> str:
    return "".join(", p_" + p for p in spec.param_names)


def _k(spec, key: str, bulk: bool) -> str:
    """The scalar kernel of ``key`` ("f", "dx", a parameter): its bulk form if asked and
    the spec has one."""
    if bulk and key in spec.bulk:
        return "_b_" + key
    return {"f": "_f", "dx": "_dx"}.get(key, "_d_" + key)


#: The loops' element layouts: "s1", element j of a row at offset j (halves, separate
#: arrays, interleaved along an inner axis); "s2" / "s2r", the pairs of an interleaved
#: last axis, the gate at the even (s2) or odd (s2r) position of each.
LAYOUTS = ("s1", "s2", "s2r")


def _strided(body: str, lay: str) -> str:
    """``body`` with the gate's, up's and their gradients' element ``i`` read from the
    pair view: ``v[2 * i + k]`` / ``dv[2 * i + k]``. One view of the pairs indexed at
    constant offsets lets LLVM vectorise them as interleaved groups; two strided views
    (or a runtime offset) leave it a scalar loop."""
    if lay == "s1":
        return body
    gk, uk = ("0", "1") if lay == "s2" else ("1", "0")
    for a, arr, k in (("dg", "dv", gk), ("du", "dv", uk), ("g", "v", gk), ("u", "v", uk)):
        for pre in (" ", "("):
            body = body.replace(f"{pre}{a}[i]", f"{pre}{arr}[2 * i + {k}]")
    return body


def _bulked(spec, keys, body) -> str:
    """``body(bulk)`` (the element loop's lines, indented 8, the clamped gate named
    ``gc``): where a key has a bulk kernel, the bulk loop checks the domain as it goes
    (one more compare in it, not a pass of its own), and a task with an element outside
    is computed again by the exact kernels (the outputs never overlap the inputs); the
    exact loop alone otherwise."""
    if not spec.bulk_domain or not any(k in spec.bulk for k in keys):
        return body(False)
    check = f"            ok &= _b_domain(gc{_args(spec)})\n"
    return (
        "        ok = True\n" + body(True) + check + "        if not ok:\n" + _indent(body(False))
    )


def _indent(code: str) -> str:
    return "".join("    " + line if line else line for line in code.splitlines(True))


def _task(lay: str, grads: bool) -> str:
    """The task loop's head: row, columns and the 1-d views of the task."""
    lines = (
        "    nbc = (C + GLU_BLOCK - 1) // GLU_BLOCK\n"
        "    for t in range(t0, t1):\n"
        "        r = t // nbc\n"
        "        c0 = (t - r * nbc) * GLU_BLOCK\n"
        "        m = min(GLU_BLOCK, C - c0)\n"
        "        ob = r * C + c0\n"
    )
    if lay == "s1":
        lines += (
            "        gb = goff + r * rs + c0\n"
            "        ub = uoff + r * rs + c0\n"
            "        g = xg[gb:gb + m]\n"
            "        u = xu[ub:ub + m]\n"
        )
        if grads:
            lines += "        dg = og[gb:gb + m]\n        du = ou[ub:ub + m]\n"
    else:  # the pairs: xg is xu and og is ou
        lines += "        pb = r * rs + 2 * c0\n        v = xg[pb:pb + 2 * m]\n"
        if grads:
            lines += "        dv = og[pb:pb + 2 * m]\n"
    lines += "        gr = go[ob:ob + m]\n" if grads else "        o = out[ob:ob + m]\n"
    return lines


def _runner(name: str, args: str) -> str:
    """``run_<name>``: the tasks on Numba's threads (``par``) or in one call."""
    return (
        f"def run_{name}({args}, par):\n"
        "    nt = R * ((C + GLU_BLOCK - 1) // GLU_BLOCK)\n"
        "    if par:\n"
        "        for t in prange(nt):\n"
        f"            {name}({args.replace('t0, t1', 't, t + 1')})\n"
        "    else:\n"
        f"        {name}({args.replace('t0, t1', '0, nt')})\n"
    )


def source(spec) -> str:
    """The gated loops of ``spec`` for each of :data:`LAYOUTS`: ``glu_fwd_<layout>``
    (out = act(gate) * up), ``glu_bwd_<layout>`` (the gate's and up's gradients) and,
    with parameters, ``glu_all_<layout>`` (those and each parameter's per-task float64
    sums), with their
    ``run_`` launchers; ``lim`` clamps the gate above and up to +-lim, ``shift`` is added
    to up after its clamp (gpt-oss's ``up + 1``)."""
    ps = list(spec.param_names)
    pa = _args(spec)
    out = [f"# generated by iglu_np.backends.cpu.gated from the spec {spec.name!r}; do not edit\n"]
    geo = "R, C, goff, uoff, rs, t0, t1, lim, shift"
    for lay in LAYOUTS:

        def fwd(bulk):
            return (
                "        for i in range(m):\n"
                "            gc = _gclamp(g[i], lim)\n"
                f"            o[i] = {_k(spec, 'f', bulk)}(gc{pa}) * _uclamp(u[i], lim, shift)\n"
            )

        args = f"xg, xu, out, {geo}{pa}"
        out.append(
            f"def glu_fwd_{lay}({args}):\n"
            + _task(lay, False)
            + _strided(_bulked(spec, ["f"], fwd), lay)
            + "\n"
        )
        out.append(_runner(f"glu_fwd_{lay}", args))

        def bwd(bulk, sums=()):
            lines = (
                "        for i in range(m):\n"
                "            gi = g[i]\n"
                "            ui = u[i]\n"
                "            gc = _gclamp(gi, lim)\n"
                "            gu = gr[i] * _uclamp(ui, lim, shift)\n"
                f"            dg[i] = _unless(gi > lim, gu * {_k(spec, 'dx', bulk)}(gc{pa}))\n"
                f"            du[i] = _unless(abs(ui) > lim, gr[i] * {_k(spec, 'f', bulk)}"
                f"(gc{pa}))\n"
            )
            for p in sums:
                lines += f"            b_{p}[i] = gu * {_k(spec, p, bulk)}(gc{pa})\n"
            return lines

        args = f"xg, xu, go, og, ou, {geo}{pa}"
        out.append(
            f"def glu_bwd_{lay}({args}):\n"
            + _task(lay, True)
            + _strided(_bulked(spec, ["f", "dx"], bwd), lay)
            + "\n"
        )
        out.append(_runner(f"glu_bwd_{lay}", args))
        if ps:
            args = f"xg, xu, go, og, ou, part, {geo}{pa}"
            bufs = "".join(f"        b_{p} = np.empty(GLU_BLOCK, np.float64)\n" for p in ps)
            sums = "".join(f"        part[{k}, t] = _lanesum(b_{p}, m)\n" for k, p in enumerate(ps))
            out.append(
                f"def glu_all_{lay}({args}):\n"
                + _task(lay, True)
                + bufs
                + _strided(_bulked(spec, ["f", "dx", *ps], lambda b: bwd(b, ps)), lay)
                + sums
                + "\n"
            )
            out.append(_runner(f"glu_all_{lay}", args))
    return "\n".join(out)
