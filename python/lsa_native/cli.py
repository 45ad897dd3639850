"""The ``lsa-native`` console command."""
from __future__ import annotations

import argparse
import sys

import numpy as np

__all__ = ["main"]


def _demo(args) -> int:
    """ZFB Theorem 4.1 on an anisotropic Λ: exact population gradient flow from Assumption 3.3
    (native DOPRI5) and SGD on sampled prompts (native LSA), both against the closed-form limit."""
    from . import cpu_kernel_isa, data, population, theory, train

    rng = np.random.default_rng(args.seed)
    d, N = args.dim, args.context
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Lambda = Q @ np.diag(np.linspace(0.5, 2.0, d)) @ Q.T  # eigenvalues spread over [0.5, 2]
    sigma = 0.5 * theory.sigma_bound(Lambda, N)
    W_pv0, W_kq0 = theory.assumption33_init(d, sigma, rng=rng)
    W_pv_star, W_kq_star = theory.thm41_limits(Lambda, N)
    L_min = population.minimum_loss(Lambda, N)
    mu = theory.pl_constant(Lambda, N, sigma, W_kq0[:d, :d] / sigma)
    print(f"lsa_native demo: d={d}, N={N}, CPU kernels {cpu_kernel_isa()}; "
          f"σ = {sigma:.3f}, PL constant μ = {mu:.4f} (ZFB Lemma 5.4)")

    # 1. Exact gradient flow on the closed-form population loss.
    times = np.linspace(0, args.flow_time, 201)
    flow = population.gradient_flow(W_pv0, W_kq0, N, Lambda=Lambda, times=times)
    flow_dist = [theory.relative_distance(P, K, W_pv_star, W_kq_star) for P, K in zip(flow.W_pv, flow.W_kq)]
    gap = flow.losses - L_min
    pl_ok = bool(np.all(gap <= np.exp(-mu * flow.times) * gap[0] * (1 + 1e-9) + 1e-13))
    print(f"  exact gradient flow to t={times[-1]:g}: {flow.steps} steps, "
          f"‖θ − θ*‖/‖θ*‖ = {flow_dist[-1]:.2e}, loss gap {gap[-1]:.2e}, "
          f"gap <= e^(−μt)·gap(0) throughout: {pl_ok}")

    # 2. SGD on sampled prompts with the native LSA loss and gradient.
    def sample(r):
        return data.linear_regression_prompts(r, args.batch, d, N, Lambda, dtype=np.float32)

    def metrics(W_pv, W_kq):
        return {"dist": theory.relative_distance(W_pv, W_kq, W_pv_star, W_kq_star),
                "gap": population.loss(W_pv, W_kq, Lambda, N) - L_min}

    W_pv, W_kq, hist = train.sgd_lsa(W_pv0, W_kq0, sample, steps=args.steps, lr=args.lr, rng=rng,
                                     lr_decay_to=0.1, metric=metrics, record_every=25,
                                     progress=None if not args.quiet else False)
    print(f"  SGD, {args.steps} steps of {args.batch} prompts: ‖θ − θ*‖/‖θ*‖ = "
          f"{hist.metrics['dist'][-1]:.4f}, exact population loss gap {hist.metrics['gap'][-1]:.2e}")
    print(f"distance to the ZFB Theorem 4.1 limit: flow {flow_dist[-1]:.2e}, SGD {hist.metrics['dist'][-1]:.4f}")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(14, 4))
        axes[0].semilogy(flow.times, np.maximum(gap, 1e-16), label="exact gradient flow")
        axes[0].semilogy(flow.times, np.exp(-mu * flow.times) * gap[0], "--",
                         label=r"$e^{-\mu t}\,$gap(0) (Lemma 5.4)")
        axes[0].set(xlabel="t", ylabel="L(θ(t)) − min L", title="Loss gap, population flow")
        axes[1].semilogy(flow.times, flow_dist)
        axes[1].set(xlabel="t", ylabel="‖θ − θ*‖/‖θ*‖", title="Distance to the Theorem 4.1 limit")
        axes[2].semilogy(hist.step, hist.metrics["dist"], label="‖θ − θ*‖/‖θ*‖")
        axes[2].semilogy(hist.step, np.maximum(hist.metrics["gap"], 1e-16), label="exact loss gap")
        axes[2].set(xlabel="SGD step", title=f"SGD on sampled prompts (B={args.batch})")
        for ax in axes[[0, 2]]:
            ax.legend()
        fig.suptitle(f"ZFB Theorem 4.1, d={d}, N={N}, anisotropic Λ")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"plot written to {args.plot}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="lsa-native", description="lsa_native command line")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="ZFB Theorem 4.1: exact gradient flow and SGD vs the limit")
    demo.add_argument("--dim", type=int, default=5)
    demo.add_argument("--context", type=int, default=20)
    demo.add_argument("--batch", type=int, default=4096)
    demo.add_argument("--steps", type=int, default=3000)
    demo.add_argument("--lr", type=float, default=0.008)
    demo.add_argument("--flow-time", type=float, default=60.0)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--plot", metavar="PNG", help="write a figure of both runs to this file")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
