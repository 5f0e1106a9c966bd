"""``iglu-np bench --device gpu``: the activations on this machine's NVIDIA GPU.

Every activation (or the ones named), forward ``act(x, out=o)`` and fused backward
``act.backward(x, g, out=o)``, on CuPy arrays of 2**26 elements by default, for the
CuPy backend and (when usable) the Numba CUDA backend, timed with CUDA events (median of
repeats, each of several back-to-back calls), reported in ms and as a ratio to the memory
limit measured in the same run:

* forward: ``cupy.copyto(o, x)`` (one read, one write);
* backward: a 16-byte-vector kernel that reads x and g and writes o (:data:`_TWO_IN_ONE`;
  ``cupy.multiply`` is an ElementwiseKernel, at CuPy's floor of about 0.32 ms for 2**26
  float32 elements on an H200, 2.5x the copy, so it cannot serve as the limit);

beside CuPy's own ufunc (``cupy.negative``: what a plain elementwise kernel costs here) and
torch / JAX (when installed) on the same memory, for the functions they have.
``dtypes`` are float16, bfloat16 (``ml_dtypes.bfloat16``; torch's and JAX's bfloat16
activations on the same memory), float32 and float64.

The per-call cost (:func:`per_call`, wall time of back-to-back calls, host overhead
included, the device synchronised once at the end) at 1,024 and 65,536 float32 elements:
``iglu``, ``gelu`` and ``silu`` on CuPy arrays (a new result, and ``out=``), beside
``cupy.negative`` (CuPy's own cheapest elementwise call), torch eager
``torch.nn.functional.gelu`` / ``silu`` and JAX ``jit`` ``gelu`` (exact, as ours) /
``silu``, and iglu_np on a torch CUDA tensor. Nothing here runs without cupy and a GPU:
:func:`run` raises a RuntimeError that says why.
"""

from __future__ import annotations

import json
import time

import numpy as np

from .references import jax_function, torch_function

SIZE = 2**26
SMALL = 1024
PER_CALL_SIZES = (1024, 65536)
PER_CALL_NAMES = ("iglu", "gelu", "silu")
DTYPES = ("float16", "bfloat16", "float32", "float64")


def data_dtype(name: str) -> np.dtype:
    """The numpy dtype of a ``--dtype`` name (bfloat16 is ml_dtypes'); ValueError naming
    the choices for others."""
    if name not in DTYPES:
        raise ValueError(f"--dtype {name!r}: expected {', '.join(DTYPES)} (comma-separated)")
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise ValueError("--dtype bfloat16 needs ml_dtypes (pip install ml_dtypes)") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _cupy():
    try:
        import cupy
    except ImportError:
        raise RuntimeError(
            "the GPU benchmark needs cupy: pip install '.[cuda12]' or '.[cuda13]' in the iglu_np checkout"
        ) from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver
        raise RuntimeError(f"the GPU benchmark needs an NVIDIA GPU: {e}") from None
    if n == 0:
        raise RuntimeError("the GPU benchmark needs an NVIDIA GPU: none found")
    return cupy


def event_time(cupy, fn, repeats=15, inner=5) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` CUDA-event samples of ``inner``
    back-to-back calls (after two warm-up calls, which compile)."""
    fn()
    fn()
    cupy.cuda.Stream.null.synchronize()
    ts = []
    for _ in range(repeats):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(a, b) / 1e3 / inner)
    return float(np.median(ts))


def wall_time(cupy, fn, calls=2000, rounds=1) -> float:
    """Seconds per call in wall time (host overhead included): the best of ``rounds``
    rounds of ``calls`` back-to-back calls, the device synchronised (every stream, so
    torch's and JAX's work too) before and after each round; a result with
    ``block_until_ready`` (JAX's asynchronous dispatch) is waited for first."""

    def sync(r):
        wait = getattr(r, "block_until_ready", None)
        if wait is not None:
            wait()
        cupy.cuda.Device().synchronize()

    sync(fn())
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            r = fn()
        sync(r)
        best = min(best, (time.perf_counter() - t) / calls)
    return best


def per_call(
    cupy, torch=None, jax=None, sizes=PER_CALL_SIZES, names=PER_CALL_NAMES, calls=2000
) -> list:
    """Wall-time rows (microseconds per call, best of 3 rounds) at each size, float32:
    ``{"n", "name", "ours_us", "ours_out_us", "torch_us", "jax_us", "ours_torch_us"}`` per
    activation (``torch_*``/``jax_*`` where installed and the library has the function)
    and one ``"(cupy.negative)"`` row per size (``ours_us``: ``cupy.negative(x)``,
    ``ours_out_us``: with ``out=``)."""
    import iglu_np

    from ..backends.cuda import _interop

    def us(fn):
        return wall_time(cupy, fn, calls, rounds=3) * 1e6

    rows = []
    for n in sizes:
        x = cupy.linspace(-5.0, 5.0, n, dtype=np.float32)
        o = cupy.empty_like(x)
        rows.append(
            {
                "n": n,
                "name": "(cupy.negative)",
                "ours_us": us(lambda: cupy.negative(x)),
                "ours_out_us": us(lambda: cupy.negative(x, out=o)),
            }
        )
        tx = _interop.to_torch(x) if torch is not None else None
        jx = _interop.to_jax(x) if jax is not None else None
        for name in names:
            act = iglu_np.get(name)
            row = {
                "n": n,
                "name": name,
                "ours_us": us(lambda: act(x)),
                "ours_out_us": us(lambda: act(x, out=o)),
            }
            tf = torch_function(torch, act) if torch is not None else None
            jf = jax_function(jax, act) if jax is not None else None
            if tx is not None:
                row["ours_torch_us"] = us(lambda: act(tx))  # a torch CUDA tensor in, one out
                if tf is not None:
                    row["torch_us"] = us(lambda: tf(tx))
            if jx is not None and jf is not None:
                jf = jax.jit(jf)
                row["jax_us"] = us(lambda: jf(jx))
            rows.append(row)
    return rows


def _torch(cupy):
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _jax():
    try:
        import jax
    except ImportError:
        return None
    try:
        return jax if any(d.platform == "gpu" for d in jax.devices()) else None
    except RuntimeError:
        return None


# x ^ g as raw 16-byte words: the memory traffic of a fused backward with no arithmetic,
# for any dtype (n16 words; the tail past the last whole word is left out of the limit).
_TWO_IN_ONE = r"""
extern "C" __global__ void iglu_np_bench_two_in_one(const uint4* __restrict__ a,
        const uint4* __restrict__ b, uint4* __restrict__ o, const long long n16) {
  const long long stride = (long long)blockDim.x * gridDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
    const uint4 p = a[i], q = b[i];
    o[i] = make_uint4(p.x ^ q.x, p.y ^ q.y, p.z ^ q.z, p.w ^ q.w);
  }
}
"""


def _two_in_one(cupy):
    """``f(x, g, o)``: the limit kernel launched over the whole 16-byte words of x."""
    from ..backends.cuda.cupy import _sm_count

    kern = cupy.RawKernel(_TWO_IN_ONE, "iglu_np_bench_two_in_one")
    sms = _sm_count(cupy)

    def f(x, g, o):
        n16 = x.nbytes // 16
        kern((max(1, min(-(-n16 // 256), sms * 8)),), (256,), (x, g, o, np.int64(n16)))

    return f


def run(names=None, size=SIZE, dtypes=("float32",), repeats=15, peers=True, progress=None) -> dict:
    import iglu_np

    from ..backends.cuda import _interop, numba_cuda

    cupy = _cupy()
    names = list(names or iglu_np.ACTIVATIONS)
    nc_ok, nc_why = numba_cuda.status()
    torch = _torch(cupy) if peers else None
    jax = _jax() if peers else None
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    data = {
        "device": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "cupy": cupy.__version__,
        "size": size,
        "numba_cuda": nc_why,
        "torch": getattr(torch, "__version__", None),
        "jax": getattr(jax, "__version__", None),
        "rows": [],
    }
    two_in_one = _two_in_one(cupy)
    rng = cupy.random.default_rng(0)
    total = len(dtypes) * len(names)
    done = 0
    for dt in dtypes:
        ddt = data_dtype(dt)
        x = (rng.standard_normal(size, dtype=np.float32) * 3).astype(ddt)
        g = rng.standard_normal(size, dtype=np.float32).astype(ddt)
        o = cupy.empty_like(x)
        copy = event_time(cupy, lambda: cupy.copyto(o, x), repeats)
        mul = event_time(cupy, lambda: two_in_one(x, g, o), repeats)
        data["rows"].append(
            {"dtype": dt, "name": "(copy limit)", "fwd_ms": copy * 1e3, "bwd_ms": mul * 1e3}
        )
        try:
            neg = event_time(cupy, lambda: cupy.negative(x, out=o), repeats)
        except (TypeError, NotImplementedError):  # a CuPy without this dtype's loop: no row
            neg = None
        if neg is not None:
            data["rows"].append({"dtype": dt, "name": "(cupy.negative)", "fwd_ms": neg * 1e3})
        tx = tg = to = None
        if torch is not None:  # bfloat16 as torch.bfloat16 (_interop.to_torch)
            tx, tg, to = (_interop.to_torch(a) for a in (x, g, o))
        for name in names:
            act = iglu_np.get(name)
            row = {"dtype": dt, "name": name}
            row["fwd_ms"] = event_time(cupy, lambda: act(x, out=o, backend="cupy"), repeats) * 1e3
            row["bwd_ms"] = (
                event_time(cupy, lambda: act.backward(x, g, out=o, backend="cupy"), repeats) * 1e3
            )
            if nc_ok and dt != "bfloat16":  # the Numba CUDA backend refuses bfloat16
                row["numba_fwd_ms"] = (
                    event_time(cupy, lambda: act(x, out=o, backend="numba_cuda"), repeats) * 1e3
                )
                row["numba_bwd_ms"] = (
                    event_time(
                        cupy, lambda: act.backward(x, g, out=o, backend="numba_cuda"), repeats
                    )
                    * 1e3
                )
            # the spec's torch and JAX forms (same function and conventions)
            tf = torch_function(torch, act) if torch is not None else None
            jf = jax_function(jax, act) if jax is not None else None
            if tf is not None:
                row["torch_fwd_ms"] = event_time(cupy, lambda: tf(tx), repeats) * 1e3
            if jf is not None:
                jf = jax.jit(jf)
                jx = _interop.to_jax(x)
                row["jax_fwd_ms"] = (
                    event_time(cupy, lambda: jf(jx).block_until_ready(), repeats) * 1e3
                )
            data["rows"].append(row)
            done += 1
            if progress:
                progress(done, total, f"{name} {dt}")
    data["per_call"] = per_call(cupy, torch, jax)
    if nc_ok:
        xs = cupy.ones(SMALL, np.float32)
        os_ = cupy.empty_like(xs)
        data["numba_iglu_us"] = (
            wall_time(cupy, lambda: iglu_np.iglu(xs, out=os_, backend="numba_cuda"), calls=300)
            * 1e6
        )
    data["trainer"] = trainer_epochs(cupy, torch)
    return data


def trainer_epochs(
    cupy,
    torch=None,
    n=65536,
    features=64,
    hidden=(256, 256),
    classes=10,
    batch=512,
    epochs=3,
    activation="gelu",
) -> dict:
    """Seconds per epoch of :class:`iglu_np.nn.MLPClassifier` fitted on CuPy arrays (Adam,
    no L2 term, no early stopping) and of the same model in torch on the same GPU
    (``nn.Linear`` layers, ``nn.GELU()`` for gelu, Adam, cross-entropy, a device shuffle
    each epoch, the loss read once per epoch), after one warm-up epoch each (compiles).
    Wall time between device synchronisations, divided by ``epochs``."""
    import warnings

    from ..nn import MLPClassifier

    rng = cupy.random.default_rng(0)
    X = rng.standard_normal((n, features), dtype=np.float32)
    y = np.random.default_rng(0).integers(0, classes, n)
    steps = -(-n // batch)
    out = {
        "n": n,
        "features": features,
        "hidden": list(hidden),
        "classes": classes,
        "batch": batch,
        "activation": activation,
        "steps_per_epoch": steps,
    }

    def fit(k):
        clf = MLPClassifier(
            hidden,
            activation=activation,
            batch_size=batch,
            max_iter=k,
            alpha=0.0,
            n_iter_no_change=10**9,
            random_state=0,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning: a fixed number of epochs
            clf.fit(X, y)

    fit(1)
    cupy.cuda.Stream.null.synchronize()
    t = time.perf_counter()
    fit(epochs)
    cupy.cuda.Stream.null.synchronize()
    out["iglu_np_epoch_s"] = (time.perf_counter() - t) / epochs
    summary = (
        f"Trainer: MLPClassifier {features}-{'-'.join(map(str, hidden))}-{classes} ({activation}, "
        f"Adam, batch {batch}, {n:,} samples, {steps} steps) on CuPy: "
        f"{out['iglu_np_epoch_s'] * 1e3:.1f} ms per epoch"
    )
    act = {"gelu": "GELU", "silu": "SiLU", "relu": "ReLU", "mish": "Mish"}.get(activation)
    if torch is not None and act is not None:
        nn = torch.nn
        sizes = [features, *hidden]
        layers = []
        for a, b in zip(sizes, sizes[1:]):
            layers += [nn.Linear(a, b), getattr(nn, act)()]
        model = nn.Sequential(*layers, nn.Linear(sizes[-1], classes)).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        tx = torch.as_tensor(X, device="cuda")
        ty = torch.as_tensor(y, device="cuda")

        def torch_epochs(k):
            for _ in range(k):
                perm = torch.randperm(n, device="cuda")
                total = torch.zeros((), device="cuda")
                for s in range(0, n, batch):
                    sel = perm[s : s + batch]
                    loss = nn.functional.cross_entropy(model(tx[sel]), ty[sel])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    total += loss.detach() * len(sel)
                float(total)

        torch_epochs(1)
        torch.cuda.synchronize()
        t = time.perf_counter()
        torch_epochs(epochs)
        torch.cuda.synchronize()
        out["torch_epoch_s"] = (time.perf_counter() - t) / epochs
        summary += (
            f"; torch {torch.__version__} {out['torch_epoch_s'] * 1e3:.1f} ms "
            f"({out['iglu_np_epoch_s'] / out['torch_epoch_s']:.2f}x)"
        )
    out["summary"] = summary + "."
    return out


def markdown(data) -> str:
    lines = [
        f"GPU: {data['device']} (cupy {data['cupy']}; numba_cuda: {data['numba_cuda']}; "
        f"torch {data['torch']}; jax {data['jax']}), {data['size']:,} elements, "
        "CUDA-event medians in ms; ratios to the copy limit (fwd) and to reading x and g and "
        "writing o with 16-byte vectors (bwd).",
        "",
    ]
    cols = [
        ("fwd_ms", "fwd"),
        ("bwd_ms", "bwd"),
        ("numba_fwd_ms", "numba fwd"),
        ("numba_bwd_ms", "numba bwd"),
        ("torch_fwd_ms", "torch fwd"),
        ("jax_fwd_ms", "jax fwd"),
    ]
    cols = [c for c in cols if any(c[0] in r for r in data["rows"])]
    lines.append("| dtype | activation | " + " | ".join(h for _, h in cols) + " |")
    lines.append("|---|---|" + "---|" * len(cols))
    limit = {}
    for r in data["rows"]:
        if r["name"] == "(copy limit)":
            limit[r["dtype"]] = (r["fwd_ms"], r["bwd_ms"])
    for r in data["rows"]:
        lf, lb = limit.get(r["dtype"], (None, None))
        cells = []
        for k, _ in cols:
            v = r.get(k)
            if v is None:
                cells.append("")
                continue
            ref = lb if "bwd" in k else lf
            cells.append(
                f"{v:.3f}" + (f" ({v / ref:.2f}x)" if ref and r["name"] != "(copy limit)" else "")
            )
        lines.append(f"| {r['dtype']} | {r['name']} | " + " | ".join(cells) + " |")
    if data.get("per_call"):
        lines += ["", per_call_markdown(data["per_call"], data.get("numba_iglu_us"))]
    s = data.get("small")  # reports written before the per-call table
    if s:
        lines += [
            "",
            f"Per call at {SMALL} elements (wall): iglu {s['iglu_us']:.1f} us, "
            f"cupy.negative {s['cupy_negative_us']:.1f} us "
            f"({s['iglu_us'] / s['cupy_negative_us']:.2f}x)"
            + (
                f"; Numba CUDA backend iglu {s['numba_iglu_us']:.1f} us."
                if "numba_iglu_us" in s
                else "."
            ),
        ]
    if data.get("trainer"):
        lines += ["", data["trainer"]["summary"]]
    return "\n".join(lines)


def per_call_markdown(rows, numba_iglu_us=None) -> str:
    """The per-call table: microseconds per call (wall, float32) and ours against
    ``cupy.negative`` (like for like: a new result, or ``out=``), torch eager and JAX jit."""
    neg = {r["n"]: r for r in rows if r["name"] == "(cupy.negative)"}
    lines = [
        "Per call (wall time, us, float32; best of 3 rounds of back-to-back calls, the "
        "device synchronised at the end). ours: on CuPy arrays; x neg: ours over "
        "cupy.negative in the same form; torch in: ours on the torch tensor.",
        "",
        "| n | function | ours | ours out= | x neg | x neg (out=) | torch | ours / torch "
        "| jax jit | ours / jax | torch in |",
        "|---|---|" + "---|" * 9,
    ]

    def f(v):
        return "" if v is None else f"{v:.1f}"

    def ratio(a, b):
        return "" if a is None or not b else f"{a / b:.2f}x"

    for r in rows:
        ng = neg.get(r["n"], {})
        own = r["name"] != "(cupy.negative)"
        t, j = r.get("torch_us"), r.get("jax_us")
        cells = [
            f"{r['n']:,}",
            r["name"],
            f(r["ours_us"]),
            f(r["ours_out_us"]),
            ratio(r["ours_us"], ng.get("ours_us")) if own else "",
            ratio(r["ours_out_us"], ng.get("ours_out_us")) if own else "",
            f(t),
            ratio(r["ours_us"], t),
            f(j),
            ratio(r["ours_us"], j),
            f(r.get("ours_torch_us")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if numba_iglu_us is not None:
        lines += [
            "",
            f"Numba CUDA backend, iglu(x, out=y) at {SMALL:,} elements: {numba_iglu_us:.1f} us per call.",
        ]
    return "\n".join(lines)


def main(args) -> int:
    import sys

    dtypes = tuple(d.strip() for d in args.dtype.split(","))
    try:
        for d in dtypes:
            data_dtype(d)
    except ValueError as e:
        print(f"iglu-np bench --device gpu: {e}", file=sys.stderr)
        return 2
    try:
        data = run(
            args.names or None,
            size=args.gpu_size,
            dtypes=dtypes,
            repeats=args.repeats or 15,
            peers=not args.no_torch,
            progress=lambda d, t, label: print(f"[{d}/{t}] {label}", file=sys.stderr),
        )
    except RuntimeError as e:
        print(f"iglu-np bench --device gpu: {e}", file=sys.stderr)
        return 2
    print(json.dumps(data, indent=1) if args.json else markdown(data))
    return 0
