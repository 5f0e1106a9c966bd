"""Python source of the CPU loops' module for one spec: per kernel kind, the ``loop_``
function over a range of flat elements (its in-place variants too) and the ``run_``
launcher that splits it into thread tasks, the bulk/exact split where the spec has bulk
kernels, and the fixed-block float64 reductions of the parameter gradients.

Pure text from the spec: :mod:`.loops` executes it with the kernels, the helpers and its
block constants bound as globals, and compiles the functions with Numba.
"""

from __future__ import annotations


def variant(alias) -> str:
    """The name suffix of the loops writing to input ``alias`` (0: x, 1: g; None: to
    ``out``): ``loop_<kind><suffix>``, ``run_<kind><suffix>``."""
    return "" if alias is None else f"_a{alias}"


def _kernel_name(key: str) -> str:
    """The scalar kernel of a spec key: "f", "dx" or a parameter name."""
    return {"f": "_f", "dx": "_dx"}.get(key, "_d_" + key)


def _param_args(spec, pv: str = "p") -> str:
    """The element i of every parameter (``<pv>_<name>``), as trailing call arguments."""
    return "".join(f", _param_at({pv}_{p}, i)" for p in spec.param_names)


def _expr(spec, ins: str, fn: str, sfx: str = "", pv: str = "p") -> str:
    """The per-element expression of a loop over ``ins`` ("x" or "x, g") calling kernel
    ``fn``; arrays are named ``x<sfx>``/``g<sfx>``, parameters ``<pv>_<name>``."""
    call = f"{fn}(x{sfx}[i]{_param_args(spec, pv)})"
    return f"g{sfx}[i] * {call}" if ins == "x, g" else call


def _one_by_one(ind: str, xc: str, at: str, recompute) -> str:
    """Lines recomputing, one by one, the elements of the chunk view ``xc`` outside the
    bulk domain: ``recompute(indent)`` gives the lines for element ``i`` of the chunk. The
    loop's trip count is their number k (not countable: LLVM never vectorises it), so the
    exact kernel runs on those elements alone, not on every lane of a vector
    (``examples/bench_vectorisation.py`` re-measures)."""
    i1, i2 = ind + "    ", ind + "        "
    return (
        f"{ind}k = 0\n"
        f"{ind}for i in range({xc}.size):\n"
        f"{i1}k += 0 if _b_domain({xc}[i]{at}) else 1\n"
        f"{ind}c -= k\n"
        f"{ind}i = 0\n"
        f"{ind}while k > 0:\n"
        f"{i1}if not _b_domain({xc}[i]{at}):\n"
        f"{recompute(i2)}"
        f"{i2}k -= 1\n"
        f"{i1}i += 1\n"
    )


def _bulk_body(spec, ins: str, key: str, o: str = "out") -> str:
    """The element loop of a kind with a bulk kernel (at most :data:`TASK_BLOCK` elements:
    ``run_`` calls it in such chunks), writing to ``o``: ``out``, or an input for the
    in-place variants. Where ``out`` is not an input, one loop runs the bulk kernel
    (``_b_<key>``, the same bits inside the spec's ``bulk_domain``) and checks the domain
    as it goes; if an element was outside, each :data:`DOMAIN_BLOCK` holding up to
    :data:`MAX_OUTSIDE` such elements has them recomputed by the exact kernel, one with
    more the whole block. In place the domain is checked before anything is written: one
    bulk loop if everything is inside, else per DOMAIN_BLOCK the bulk kernel, the exact
    one, or (up to MAX_OUTSIDE elements outside) per :data:`DOMAIN_CHUNK` either. No allocations: a call in the function
    would sit inside its loops for tools/x86_asm.py."""
    ps = list(spec.param_names)
    ins_l = ins.split(", ")
    arrs = ins_l + ([o] if o not in ins_l else [])

    def views(ind):
        return "".join(f"{ind}{a}b = {a}[s:e]\n" for a in arrs) + "".join(
            f"{ind}pb_{p} = _param_slice(p_{p}, s, e)\n" for p in ps
        )

    def cviews(ind):
        return "".join(f"{ind}{a}c = {a}b[t:te]\n" for a in arrs) + "".join(
            f"{ind}pc_{p} = _param_slice(pb_{p}, t, te)\n" for p in ps
        )

    at = _param_args(spec, "pb")
    atc = _param_args(spec, "pc")
    expr = _expr(spec, ins, _kernel_name(key))
    exact = _expr(spec, ins, _kernel_name(key), "b", "pb")
    exact_c = _expr(spec, ins, _kernel_name(key), "c", "pc")
    fast = _expr(spec, ins, "_b_" + key, "b", "pb")
    fast_c = _expr(spec, ins, "_b_" + key, "c", "pc")
    at0 = "".join(f", _param_at(p_{p}, 0)" for p in ps)
    at_all = _param_args(spec)
    fast_all = _expr(spec, ins, "_b_" + key)
    # out aliasing an input reaches loop_<kind> only from callers that do not choose the
    # in-place variant: the plain exact loop, correct there (and as slow as LLVM's alias
    # check makes any loop), not a third copy of the kernels to compile
    aliased = "" if o != "out" else "".join(f" or _same(out, {a})" for a in ins_l)
    head = (
        f"    n = {o}.size\n"
        # 0 (with the first element's parameters) is in every domain that is not empty for
        # the dtype and these parameters: else one plain loop (softplus with beta != 1; an
        # empty domain is slower in blocks) and no checks.
        f"    if n == 0 or not _b_domain(_zero({o}){at0}){aliased}:\n"
        f"        for i in range(n):\n"
        f"            {o}[i] = {expr}\n"
        f"        return\n"
    )

    def domain_blocks(ind, after):
        """The loop over DOMAIN_BLOCKs of a range with elements outside the domain.
        ``after`` (mending, out not an input): the bulk loop has written every element, so
        a block all inside is done and in a chunk only the elements outside are recomputed.
        Else (in place, nothing written yet) each block or chunk all inside runs the bulk
        kernel and a chunk holding one the exact kernel throughout."""
        i2, i3, i4, i5 = (ind + " " * k for k in (4, 8, 12, 16))
        ob = f"{o}b"
        clean = (
            f"{i3}continue\n"
            if after
            else f"{i3}for i in range({ob}.size):\n{i4}{ob}[i] = {fast}\n{i3}continue\n"
        )
        # After the bulk loop only the elements outside are recomputed; in place a chunk
        # holding one runs the exact kernel throughout (nothing of it is written yet).
        chunk = (
            _one_by_one(i3, "xc", atc, lambda i: f"{i}{o}c[i] = {exact_c}\n")
            + f"{i3}if c == 0:\n{i4}break\n"
            if after
            else f"{i3}ok = True\n"
            f"{i3}for i in range(xc.size):\n"
            f"{i4}ok &= _b_domain(xc[i]{atc})\n"
            f"{i3}if ok:\n"
            f"{i4}for i in range(xc.size):\n{i5}{o}c[i] = {fast_c}\n{i4}continue\n"
            f"{i3}for i in range(xc.size):\n{i4}{o}c[i] = {exact_c}\n"
        )
        return (
            f"{ind}for s in range(0, n, DOMAIN_BLOCK):\n"
            f"{i2}e = min(s + DOMAIN_BLOCK, n)\n"
            f"{views(i2)}"
            f"{i2}c = 0\n"
            f"{i2}for i in range(xb.size):\n"
            f"{i3}c += 0 if _b_domain(xb[i]{at}) else 1\n"
            f"{i2}if c == 0:\n{clean}"
            f"{i2}if c > MAX_OUTSIDE:\n"
            f"{i3}for i in range({ob}.size):\n"
            f"{i4}{ob}[i] = {exact}\n"
            f"{i3}continue\n"
            f"{i2}for t in range(0, {ob}.size, DOMAIN_CHUNK):\n"
            f"{i3}te = min(t + DOMAIN_CHUNK, {ob}.size)\n"
            f"{cviews(i3)}"
            f"{chunk}"
        )

    if o == "out":
        return head + (
            # The check inside the bulk loop (one more vcmp in it) instead of a pass of
            # its own before it: one read of x fewer. The store before the check: the
            # other order schedules the same instructions worse (gelu_a and tanhshrink
            # float64; examples/bench_vectorisation.py re-measures both choices).
            f"    ok = True\n"
            f"    for i in range(n):\n"
            f"        out[i] = {fast_all}\n"
            f"        ok &= _b_domain(x[i]{at_all})\n"
            f"    if ok:\n"
            f"        return\n"
            # Mending (x is intact): the exact kernel on the elements outside alone,
            # found per DOMAIN_CHUNK, not on the whole DOMAIN_BLOCK holding one (a few
            # scattered elements outside would otherwise cost whole blocks).
            f"{domain_blocks('    ', True)}"
        )
    return head + (
        # In place: the whole range first (at most TASK_BLOCK elements, so the second read
        # hits the cache): one plain bulk loop where everything is inside, the usual case.
        # Blocks of DOMAIN_BLOCK with a loop per block are slower there (block overhead,
        # and constants rematerialised in the nested loop).
        f"    ok = True\n"
        f"    for i in range(n):\n"
        f"        ok &= _b_domain(x[i]{at_all})\n"
        f"    if ok:\n"
        f"        for i in range(n):\n"
        f"            {o}[i] = {fast_all}\n"
        f"        return\n"
        f"{domain_blocks('    ', False)}"
    )


def _indent(code: str) -> str:
    return "".join("    " + line if line else line for line in code.splitlines(True))


def _reduce_exact(spec, outs) -> str:
    """The exact element loop of a reduction block (``_reduce_block_<p>``,
    ``_reduce_block_all``: x and g at most :data:`REDUCE_BLOCK` elements, scalar
    parameters): ``outs`` pairs buffers with spec keys, ``buf[i] = g[i] * kernel(x[i])``."""
    at = _param_args(spec)
    return "    for i in range(x.size):\n        xi = x[i]\n        gi = g[i]\n" + "".join(
        f"        {b}[i] = gi * {_kernel_name(k)}(xi{at})\n" for b, k in outs
    )


def _reduce_bulk(spec, outs) -> str:
    """:func:`_reduce_exact`'s loop from the bulk kernels of ``outs``' keys, for a domain
    that is not empty: one loop of them checks the domain as it goes and the elements
    outside are then recomputed by the exact kernels (the same bits as the exact loop:
    the bulk kernels are the exact ones inside the domain), found per DOMAIN_BLOCK, then
    per DOMAIN_CHUNK. The exact kernels branch, so a loop of them stays scalar, where the
    bulk loop vectorises (the asv ``BackwardAll`` and ``BackwardParams`` benchmarks
    re-measure)."""
    at = _param_args(spec)

    def recompute(ind):
        return f"{ind}xi = xc[i]\n{ind}gi = g[t + i]\n" + "".join(
            f"{ind}{b}[t + i] = gi * {_kernel_name(k)}(xi{at})\n" for b, k in outs
        )

    return (
        "    ok = True\n"
        "    for i in range(x.size):\n"
        "        xi = x[i]\n"
        "        gi = g[i]\n"
        + "".join(f"        {b}[i] = gi * _b_{k}(xi{at})\n" for b, k in outs)
        + f"        ok &= _b_domain(xi{at})\n"
        "    if not ok:\n"
        "        for s in range(0, x.size, DOMAIN_BLOCK):\n"
        "            e = min(s + DOMAIN_BLOCK, x.size)\n"
        "            xb = x[s:e]\n"
        "            c = 0\n"
        "            for i in range(xb.size):\n"
        f"                c += 0 if _b_domain(xb[i]{at}) else 1\n"
        "            if c == 0:\n"
        "                continue\n"
        "            for t in range(s, e, DOMAIN_CHUNK):\n"
        "                xc = x[t:min(t + DOMAIN_CHUNK, e)]\n"
        + _one_by_one("                ", "xc", at, recompute)
        + "                if c == 0:\n"
        "                    break\n"
    )


def _reduce_loop(spec, exact: str, bulk: str) -> str:
    """``bulk`` where the domain is not empty for these parameters and the dtype (0, with
    them, is in every such domain: see _bulk_body), else ``exact``."""
    at0 = "".join(f", _param_at(p_{p}, 0)" for p in spec.param_names)
    return (
        f"    if x.size == 0 or not _b_domain(_zero(x){at0}):\n"
        + _indent(exact)
        + "    else:\n"
        + _indent(bulk)
    )


def source(spec) -> str:
    ps = list(spec.param_names)
    # Parameters are p_<name> in the generated code: a parameter called b, n or x would
    # otherwise clash with the loop's own names (squareplus has b).
    pa = "".join(", p_" + p for p in ps)
    # kind -> (data inputs, spec key of its kernel)
    calls = {"fwd": ("x", "f"), "dx": ("x", "dx"), "bwd": ("x, g", "dx")}
    for p in ps:
        calls["d_" + p] = ("x", p)
        calls["bwd_" + p] = ("x, g", p)
    out = [f"# generated by iglu_np.backends.cpu.loops from the spec {spec.name!r}; do not edit\n"]
    for kind, (ins, key) in calls.items():
        expr = _expr(spec, ins, _kernel_name(key))
        ins_l = ins.split(", ")
        # The element loop is one function (loop_<kind>) that both the single-thread path
        # and every prange block call: one hot loop to vectorise and to inspect
        # (tools/x86_asm.py, simd_report), compiled without the parfor machinery around it.
        # loop_<kind>_a<j> is the in-place variant writing to input j (out = x, or out =
        # grad_out): given out aliasing an input, LLVM's runtime alias check sends
        # loop_<kind> to its scalar loop, an order of magnitude slower.
        for j, o in [(None, "out"), *enumerate(ins_l)]:
            sfx, oarg = variant(j), (", out" if j is None else "")
            # Views from 0: with i in range(lo, hi) Numba's negative-index wraparound stays
            # in the loop and LLVM vectorises it with gathers/scatters (slower than scalar).
            sl = "".join(f"    {a} = {a}[lo:hi]\n" for a in ins_l + ["out"] * (j is None))
            sl += "".join(f"    p_{p} = _param_slice(p_{p}, lo, hi)\n" for p in ps)
            body = f"    for i in range({o}.size):\n        {o}[i] = {expr}\n"
            if key in spec.bulk:
                body = _bulk_body(spec, ins, key, o)
            out.append(
                f"def loop_{kind}{sfx}({ins}{oarg}, lo, hi{pa}):\n"
                f"{sl}"
                f"{body}\n"
                f"def run_{kind}{sfx}({ins}{oarg}, par{pa}):\n"
                f"    n = x.size\n"
                f"    if par:\n"
                f"        s = _skew({o}, n)\n"
                f"        nb = (n - s + TASK_BLOCK - 1) // TASK_BLOCK\n"
                f"        for b in prange(nb):\n"
                f"            lo = s + b * TASK_BLOCK\n"
                f"            loop_{kind}{sfx}({ins}{oarg}, 0 if b == 0 else lo,"
                f" min(lo + TASK_BLOCK, n){pa})\n"
                f"    else:\n"
                + (
                    f"        for lo in range(0, n, TASK_BLOCK):\n"
                    f"            loop_{kind}{sfx}({ins}{oarg}, lo, min(lo + TASK_BLOCK, n){pa})\n"
                    if key in spec.bulk
                    else f"        loop_{kind}{sfx}({ins}{oarg}, 0, n{pa})\n"
                )
            )
    for p in ps:
        body = _reduce_exact(spec, [("buf", p)])
        if p in spec.bulk:
            body = _reduce_loop(spec, body, _reduce_bulk(spec, [("buf", p)]))
        out.append(
            f"def _reduce_block_{p}(x, g, b, n{pa}):\n"
            f"    lo = b * REDUCE_BLOCK\n"
            f"    hi = min(lo + REDUCE_BLOCK, n)\n"
            f"    buf = np.empty(REDUCE_BLOCK, np.float64)\n"
            f"    x = x[lo:hi]\n"  # views from 0: see loop_<kind>
            f"    g = g[lo:hi]\n"
            f"{body}"
            f"    return _lanesum(buf, hi - lo)\n\n"
            f"def reduce_{p}(x, g, part, par{pa}):\n"
            f"    n = x.size\n"
            f"    if par:\n"
            f"        for b in prange(part.size):\n"
            f"            part[b] = _reduce_block_{p}(x, g, b, n{pa})\n"
            f"    else:\n"
            f"        for b in range(part.size):\n"
            f"            part[b] = _reduce_block_{p}(x, g, b, n{pa})\n"
        )
    if ps:
        # backward_all: grad_x and every parameter's block sums from one read of x and g,
        # with the same per-element values and block sums as run_bwd and reduce_<p>
        bufs = "".join(f"    b_{p} = np.empty(REDUCE_BLOCK, np.float64)\n" for p in ps)
        sums = "".join(f"    part[{k}, b] = _lanesum(b_{p}, hi - lo)\n" for k, p in enumerate(ps))
        outs = [("o", "dx")] + [(f"b_{p}", p) for p in ps]
        body = _reduce_exact(spec, outs)
        if all(k in spec.bulk for _, k in outs):
            body = _reduce_loop(spec, body, _reduce_bulk(spec, outs))
        elif spec.bulk.keys() & {k for _, k in outs}:
            # Some kernels bulk, some not: a loop each over the block while it is in
            # cache, so the bulk ones keep a vector loop (xsilu). One loop for all is
            # faster where they are alike (elu, squareplus), and where the domain is
            # empty (xielu float64: the one exact loop, as without bulk kernels). The asv
            # BackwardAll benchmark re-measures.
            body = _reduce_loop(
                spec,
                body,
                "".join(
                    (_reduce_bulk if k in spec.bulk else _reduce_exact)(spec, [(b, k)])
                    for b, k in outs
                ),
            )
        out.append(
            f"def _reduce_block_all(x, g, o, part, b, n{pa}):\n"
            f"    lo = b * REDUCE_BLOCK\n"
            f"    hi = min(lo + REDUCE_BLOCK, n)\n"
            f"    x = x[lo:hi]\n"
            f"    g = g[lo:hi]\n"
            f"    o = o[lo:hi]\n"
            f"{bufs}"
            f"{body}"
            f"{sums}\n"
            f"def reduce_all(x, g, o, part, par{pa}):\n"
            f"    n = x.size\n"
            f"    if par:\n"
            f"        for b in prange(part.shape[1]):\n"
            f"            _reduce_block_all(x, g, o, part, b, n{pa})\n"
            f"    else:\n"
            f"        for b in range(part.shape[1]):\n"
            f"            _reduce_block_all(x, g, o, part, b, n{pa})\n"
        )
    for kind, (ins, key) in calls.items():
        # run_bf16_<kind>(x[, g], out, par, *params): x, g and out bfloat16 bits (uint16),
        # scalar float32 parameters; loop_<kind> on float32 blocks widened from them, the
        # results rounded once into out. A block is read whole before its part of out is
        # written, so out may be x or g itself.
        ins_l = ins.split(", ")
        wide = "".join(
            f"    {a}w = np.empty(BF16_BLOCK, np.uint32)\n    _widen({a}[lo:hi], {a}w[:m])\n"
            for a in ins_l
        )
        fl = ", ".join(f"{a}w.view(np.float32)" for a in ins_l)
        out.append(
            f"def _bf16_block_{kind}({ins}, out, b, n{pa}):\n"
            f"    lo = b * BF16_BLOCK\n"
            f"    hi = min(lo + BF16_BLOCK, n)\n"
            f"    m = hi - lo\n"
            f"{wide}"
            f"    ow = np.empty(BF16_BLOCK, np.uint32)\n"
            f"    loop_{kind}({fl}, ow.view(np.float32), 0, m{pa})\n"
            f"    _narrow(ow[:m], out[lo:hi])\n\n"
            f"def run_bf16_{kind}({ins}, out, par{pa}):\n"
            f"    n = x.size\n"
            f"    nb = (n + BF16_BLOCK - 1) // BF16_BLOCK\n"
            f"    if par:\n"
            f"        for b in prange(nb):\n"
            f"            _bf16_block_{kind}({ins}, out, b, n{pa})\n"
            f"    else:\n"
            f"        for b in range(nb):\n"
            f"            _bf16_block_{kind}({ins}, out, b, n{pa})\n"
        )
    return "\n".join(out)
