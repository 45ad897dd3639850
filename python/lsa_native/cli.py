"""The ``lsa-native`` console command."""
from __future__ import annotations

import argparse
import sys

import numpy as np

__all__ = ["main"]


def _demo(args) -> int:
    from . import cpu_kernel_isa, data, theory, train

    rng = np.random.default_rng(args.seed)
    d, N = args.dim, args.context
    # An anisotropic covariance with eigenvalues spread over [0.5, 2].
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Lambda = Q @ np.diag(np.linspace(0.5, 2.0, d)) @ Q.T
    sigma = 0.5 * theory.sigma_bound(Lambda, N)
    W_pv0, W_kq0 = theory.assumption33_init(d, sigma, rng=rng)
    W_pv_star, W_kq_star = theory.thm41_limits(Lambda, N)

    def sample(r):
        return data.linear_regression_prompts(r, args.batch, d, N, Lambda, dtype=np.float32)

    def distance(W_pv, W_kq):
        return {"dist": theory.relative_distance(W_pv, W_kq, W_pv_star, W_kq_star)}

    print(f"lsa_native demo: SGD on sampled prompts, d={d}, N={N}, batch={args.batch}, "
          f"steps={args.steps}, CPU kernels: {cpu_kernel_isa()}")
    W_pv, W_kq, hist = train.sgd_lsa(W_pv0, W_kq0, sample, steps=args.steps, lr=args.lr, rng=rng,
                                     lr_decay_to=0.1, metric=distance, record_every=50,
                                     progress=not args.quiet)
    for step, loss, dist in zip(hist.step, hist.loss, hist.metrics["dist"]):
        if step % 500 == 0 or step == hist.step[-1]:
            print(f"  step {step:6d}  loss {loss:.5f}  ‖θ − θ*‖/‖θ*‖ = {dist:.4f}")
    final = hist.metrics["dist"][-1]
    print(f"distance to the ZFB Theorem 4.1 limit: {final:.4f}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="lsa-native", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train the LSA by SGD and compare with ZFB Theorem 4.1")
    demo.add_argument("--dim", type=int, default=5)
    demo.add_argument("--context", type=int, default=20)
    demo.add_argument("--batch", type=int, default=4096)
    demo.add_argument("--steps", type=int, default=3000)
    demo.add_argument("--lr", type=float, default=0.008)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
