"""The paper's Table 4 in miniature: IGLU on long-tailed digits.

Digits made long-tailed at rho in {10, 20, 50, 100} (eq. 12), class-weighted
cross-entropy, IGLU and IGLU-Approx at sigma in {0.1, 0.5, 1, 5, 10} against ReLU, GELU,
SiLU, Hardswish and Mish, several seeds; mean ± std of balanced test accuracy and test
loss. Writes table4_digits.md, table4_digits.csv and table4_digits.png to --out.

    python examples/imbalanced_digits.py --quick          # ~1 minute on 2 cores
    python examples/imbalanced_digits.py                  # full setting, ~10 minutes

Needs scikit-learn (digits) and, for the plot, matplotlib: pip install ".[examples]" in the checkout.
"""

import argparse

from iglu_np.nn.experiments import long_tailed_digits, markdown_table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer seeds and epochs (~1 minute)")
    ap.add_argument("--out", default="table4_digits", help="output directory")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    ap.add_argument("--seeds", type=int, default=None, help="override the number of seeds")
    ap.add_argument("--epochs", type=int, default=None, help="override the number of epochs")
    args = ap.parse_args()
    res = long_tailed_digits(
        quick=args.quick,
        out_dir=args.out,
        n_jobs=args.jobs,
        seeds=None if args.seeds is None else range(args.seeds),
        epochs=args.epochs,
        progress=True,
    )
    print(markdown_table(res))
    print(f"{len(res['runs'])} runs in {res['seconds']:.0f} s; wrote {', '.join(res['files'])}")


if __name__ == "__main__":
    main()
