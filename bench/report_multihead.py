"""H-head linear attention (lsa_native.multihead), the case of issue 21: 5 heads with separate
rank-one keys and queries (W^KQ_h = W^K_hᵀ W^Q_h), d = 5, N = 20, B = 4096, float32, full-batch
SGD from init 0.01 on prompts of LinearPrompts(Λ = diag(1, …, 5)/15) (Zhang et al. 2025's data
class: eigenvalues ∝ 1..d, tr Λ = 1, so the initial loss is ½ tr Λ = 0.5).

Part 1, one SGD step (loss, gradient, update) timed in the same run, medians:
  native     lsa_native.multihead.loss_and_grad (Gram-first CPU kernels) + numpy update
  torch-attn a plain PyTorch loop of the same model as a user writes it: every head's
             (N+1)x(N+1) attention matrix, F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N, ŷ = F[:, d, N]
  torch-qcol the best plain PyTorch form: the query column only, ŷ = Σ_h p_hᵀ (E Eᵀ/N) W^KQ_h e_q
  torch-wrap the lsa_native.torch module (MultiHeadLinearSelfAttention, output='prediction')
  lsa-heads  what a user could do before: H one-head lsa.predict calls, then H lsa.predict_vjp
             calls with the common residual, chained to W^K_h, W^Q_h in numpy
each on a fixed batch ("model"), with the step's prompts drawn by the native sampler into a
reused buffer ("+ native sampling", the same arrays for every row), and with each loop's own
sampling ("+ own sampling": the torch loops draw x ~ N(0, Λ), w ~ N(0, I) with torch.randn as a
plain PyTorch script does; the native rows keep the native sampler). Then the sampled training
step with fresh prompts every step: the native tokens route (sampler into a buffer + the kernel),
the native fused steps of LinearPrompts.multihead_fused_step ("tokens": prompts drawn a few at a
time in cache; "wishart": G drawn by the Bartlett decomposition, O(H d²) per prompt, the route of
MultiHeadLSAObjective(method="wishart")) vs the PyTorch loops with their own sampling.

Part 2, the training curve of the native step: the loss (mean over windows of 50 steps) at
checkpoints and the plateaus found (runs of >= 8 windows within ±2 %). ``--data fixed`` (default):
full-batch gradient descent on one fixed training set of B prompts, as in Zhang et al. (their
plateaus are training losses on a fixed set); ``--data online``: fresh prompts every step (the
plateaus are then population losses, slightly higher).

    python bench/report_multihead.py [--steps 40000] [--lr 2.0] [--data fixed|online]
                                     [--repeats 15] [--threads 0] [--skip-timing] [--skip-training]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import lsa_native as ln
from lsa_native import multihead as mh
from lsa_native.sampling import LinearPrompts

from timing import median_seconds

D, N, H, R, B = 5, 20, 5, 1, 4096


def spec(seed=1):
    return LinearPrompts(D, N, Lambda=np.diag(np.arange(1, D + 1) / 15.0), seed=seed)


def init(seed=0):
    rng = np.random.default_rng(seed)
    return [0.01 * rng.standard_normal(s).astype(np.float32)
            for s in ((H, D + 1, D + 1), (H, R, D + 1), (H, R, D + 1))]


def torch_step_fn(params, lr, form):
    W_pv, W_k, W_q = (torch.tensor(p, requires_grad=True) for p in params)

    def step(E_np, y_np):
        E, y = torch.from_numpy(E_np), torch.from_numpy(y_np)
        W_kq = W_k.transpose(1, 2) @ W_q  # [H, d+1, d+1]
        if form == "attn":
            Eh = E.unsqueeze(1)  # [B, 1, d+1, N+1]
            A = Eh.transpose(-1, -2) @ W_kq @ Eh / N  # Eᵀ W^KQ_h E: [B, H, N+1, N+1]
            F = E + (W_pv @ Eh @ A).sum(dim=1)
            pred = F[:, D, N]
        else:
            G = E @ E.transpose(1, 2) / N  # [B, d+1, d+1]
            q = E[:, :, N] @ W_kq.transpose(1, 2)  # q_h = W^KQ_h e_q: [H, B, d+1]
            pG = W_pv[:, D, :].unsqueeze(0) @ G  # p_hᵀ G: [B, H, d+1]
            pred = E[:, D, N] + (pG * q.transpose(0, 1)).sum(dim=(1, 2))
        loss = 0.5 * ((pred - y) ** 2).mean()
        for p in (W_pv, W_k, W_q):
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in (W_pv, W_k, W_q):
                p -= lr * p.grad
        return float(loss.detach())

    return step


def torch_wrap_step_fn(params, lr):
    import lsa_native.torch as lt

    model = lt.MultiHeadLinearSelfAttention(D, H, rank=R, output="prediction", dtype=torch.float32)
    with torch.no_grad():
        model.W_pv.copy_(torch.from_numpy(params[0]))
        model.W_k.copy_(torch.from_numpy(params[1]))
        model.W_q.copy_(torch.from_numpy(params[2]))
    opt = torch.optim.SGD(model.parameters(), lr=lr)

    def step(E_np, y_np):
        E, y = torch.from_numpy(E_np), torch.from_numpy(y_np)
        loss = 0.5 * ((model(E) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def lsa_heads_step_fn(params, lr):
    from lsa_native import lsa

    W_pv, W_k, W_q = (p.copy() for p in params)

    def step(E, y):
        W_kq = mh.merge_kq(W_k, W_q).astype(E.dtype)
        pred = sum(lsa.predict(E, W_pv[h], W_kq[h]) for h in range(H))  # label slots are 0
        res = pred - y
        grads = [lsa.predict_vjp(E, W_pv[h], W_kq[h], res / B, with_input_grad=False)
                 for h in range(H)]
        g_k, g_q = mh.chain_kq(W_k, W_q, np.stack([g[1] for g in grads]))
        W_pv[...] -= lr * np.stack([g[0] for g in grads])
        W_k[...] -= lr * g_k
        W_q[...] -= lr * g_q
        return 0.5 * float(np.mean(res * res))

    return step


def torch_prompts(generator):
    """(E, y_q) of B prompts drawn with torch ops (x ~ N(0, Λ), w ~ N(0, I), y = w·x)."""
    lam = torch.sqrt(torch.arange(1, D + 1, dtype=torch.float32) / 15.0)
    x = torch.randn(B, N + 1, D, generator=generator) * lam
    w = torch.randn(B, D, generator=generator)
    y = torch.einsum("bnd,bd->bn", x, w)
    E = torch.cat([x, y.unsqueeze(-1)], dim=-1).transpose(1, 2).contiguous()
    y_q = E[:, D, N].clone()
    E[:, D, N] = 0
    return E.numpy(), y_q.numpy()


def native_step_fn(params, lr):
    W_pv, W_k, W_q = (p.copy() for p in params)

    def step(E, y):
        loss, g_pv, g_k, g_q = mh.loss_and_grad(E, y, W_pv, W_k=W_k, W_q=W_q)
        W_pv[...] -= lr * g_pv
        W_k[...] -= lr * g_k
        W_q[...] -= lr * g_q
        return loss

    return step


def fused_step_fn(params, lr, method):
    """The native fused H-head step of LinearPrompts.multihead_fused_step (fresh prompts every
    call): W^KQ merged, the gradient chained to W^K_h, W^Q_h, SGD update."""
    W_pv, W_k, W_q = (p.copy() for p in params)
    step_fn = spec().multihead_fused_step(batch=B, method=method, dtype=np.float32)
    d_pv, d_kq = np.empty_like(W_pv), np.empty((H, D + 1, D + 1), np.float32)
    counter = iter(range(1, 2**32))

    def step():
        W_kq = np.ascontiguousarray(mh.merge_kq(W_k, W_q), np.float32)
        loss = step_fn(W_pv, W_kq, next(counter), d_pv, d_kq)
        g_k, g_q = mh.chain_kq(W_k, W_q, d_kq)
        W_pv[...] -= lr * d_pv
        W_k[...] -= lr * g_k
        W_q[...] -= lr * g_q
        return loss

    return step


def sampled_table(rows, lr, repeats):
    """The sampled training step with fresh prompts every step: the native routes vs the PyTorch
    loops with their own sampling (same run, medians)."""
    params = init()
    native = {"native tokens (sampler + loss_and_grad)": rows["native"][1],
              "native tokens, fused step": median_seconds(fused_step_fn(params, lr, "tokens"), repeats),
              "native wishart, fused step": median_seconds(fused_step_fn(params, lr, "wishart"), repeats)}
    torch_rows = {"torch-qcol (own sampling)": rows["torch-qcol"][2],
                  "torch-wrap (own sampling)": rows["torch-wrap"][2],
                  "torch-attn (own sampling)": rows["torch-attn"][2]}
    ref = rows["torch-qcol"][2]
    print(f"\nFresh prompts every step (the sampled training step), medians of {repeats}; "
          f"speedup = torch-qcol (own sampling) / row")
    print(f"{'step':<42}{'ms':>9}{'speedup':>10}")
    for name, t in {**native, **torch_rows}.items():
        print(f"{name:<42}{t * 1e3:>9.2f}{ref / t:>9.1f}x")


def timings(lr, repeats):
    s = spec()
    E = np.empty((B, D + 1, N + 1), np.float32)
    y = np.empty(B, np.float32)
    s.sample_embedding(B, 0, np.float32, E=E, y_q=y)
    params = init()
    steps = {"native": native_step_fn(params, lr), "torch-attn": torch_step_fn(params, lr, "attn"),
             "torch-qcol": torch_step_fn(params, lr, "qcol"),
             "torch-wrap": torch_wrap_step_fn(params, lr), "lsa-heads": lsa_heads_step_fn(params, lr)}
    own_sampling = {"torch-attn", "torch-qcol", "torch-wrap"}
    generator = torch.Generator().manual_seed(0)
    rows = {}
    for name, fn in steps.items():
        model = median_seconds(lambda: fn(E, y), repeats)
        counter = iter(range(1, 10**9))

        def native_sampled():
            s.sample_embedding(B, next(counter), np.float32, E=E, y_q=y)
            fn(E, y)

        sampled = median_seconds(native_sampled, repeats)
        own = median_seconds(lambda: fn(*torch_prompts(generator)), repeats) if name in own_sampling else sampled
        rows[name] = (model, sampled, own)
    base = rows["native"]
    print(f"\nPart 1: one full-batch SGD step, H = {H}, r = {R}, d = {D}, N = {N}, B = {B}, float32, "
          f"{ln.num_threads()} native threads, {torch.get_num_threads()} torch threads "
          f"(ISA {ln._core.cpu_kernel_isa()}); medians of {repeats}")
    print(f"{'step':<12}{'model ms':>10}{'ratio':>8}{'+ native sampling':>19}{'ratio':>8}"
          f"{'+ own sampling':>16}{'ratio':>8}")
    for name, (m, t, o) in rows.items():
        print(f"{name:<12}{m * 1e3:>10.2f}{m / base[0]:>7.1f}x{t * 1e3:>19.2f}{t / base[1]:>7.1f}x"
              f"{o * 1e3:>16.2f}{o / base[2]:>7.1f}x")
    sampled_table(rows, lr, repeats)


def plateaus(window_means, width=8, tol=0.02):
    """(first window, last window, median) of every run of >= `width` windows whose means stay
    within ±tol of the run's median."""
    out, i, m = [], 0, len(window_means)
    while i < m:
        j = i + 1
        while j < m and abs(window_means[j] / np.median(window_means[i:j + 1]) - 1) <= tol:
            j += 1
        if j - i >= width:
            out.append((i, j - 1, float(np.median(window_means[i:j]))))
        i = j
    return out


def training(lr, steps, data):
    s = spec()
    E = np.empty((B, D + 1, N + 1), np.float32)
    y = np.empty(B, np.float32)
    s.sample_embedding(B, 0, np.float32, E=E, y_q=y)
    step = native_step_fn(init(), lr)
    losses = np.empty(steps)
    t0 = time.perf_counter()
    for k in range(steps):
        if data == "online":
            s.sample_embedding(B, k, np.float32, E=E, y_q=y)
        losses[k] = step(E, y)
    took = time.perf_counter() - t0
    w = 50
    means = losses[: steps // w * w].reshape(-1, w).mean(axis=1)
    print(f"\nPart 2: native training ({data} data), lr = {lr}, {steps} steps in {took:.1f} s "
          f"({took / steps * 1e3:.2f} ms/step)")
    marks = [0, 250, 500, 1000, 2000, 4000, 8000, 12000, 16000, 20000, 30000, 40000, 60000]
    print("step   " + "  ".join(f"{k:>6}" for k in marks if k < steps))
    print("loss   " + "  ".join(f"{means[min(k // w, len(means) - 1)]:>6.3f}" for k in marks if k < steps))
    print("plateaus (steps, loss):")
    for a, b, level in plateaus(means):
        print(f"  {a * w:>6}-{(b + 1) * w:<6} {level:.3f}")
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40000)
    ap.add_argument("--lr", type=float, default=2.0)
    ap.add_argument("--data", choices=("fixed", "online"), default="fixed")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0, help="native and torch threads (0: default)")
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args()
    if args.threads:
        ln.set_num_threads(args.threads)
    torch.set_num_threads(ln.num_threads())
    if not args.skip_timing:
        timings(args.lr, args.repeats)
    if not args.skip_training:
        training(args.lr, args.steps, args.data)


if __name__ == "__main__":
    main()
