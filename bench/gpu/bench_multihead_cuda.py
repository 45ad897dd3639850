"""GPU benchmark of the H-head linear attention (lsa_native.multihead, issue 21) on CUDA arrays:
ŷ = E[d, N] + Σ_h p_hᵀ G q_h, L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² [ZFB (3.6)-(3.7) per head].

1. loss_and_grad on a device batch: native CUDA vs PyTorch CUDA autograd of the same model in its
   O(N d) token form (H heads batched in one einsum), CUDA-event-free wall medians with a
   synchronize per group; then the prediction alone (native predict vs torch under no_grad).
2. Fresh prompts alone: ``LinearPrompts.sample_embedding(device="cuda")`` into reused device
   buffers (the GPU sampler, issue 18) vs torch.randn-based generation of the same law.
3. The training step on fresh prompts: native (``sample_embedding(device="cuda")`` into reused
   device buffers + ``multihead.loss_and_grad`` on the device + SGD in numpy on the host, as
   ``MultiHeadLSAObjective(device="cuda")`` in ``fit``'s host-θ loop) vs a PyTorch CUDA loop
   (torch.randn prompts, autograd, torch.optim.SGD), the same run.

    python bench/gpu/bench_multihead_cuda.py [--out results.json] [--quick]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

import lsa_native
from lsa_native import cuda, multihead as mh, sampling

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sampled import steps_per_second  # noqa: E402

LR = 1e-3
SIZES = [(5, 20, 5, 4096), (5, 20, 5, 1 << 16), (20, 100, 8, 1 << 14)]  # (d, N, H, B)


def torch_model_predict(E, W_pv, W_kq, N):
    """The H-head prediction in token form: q_h = W^KQ_h e_q, ŷ = E[d,N] + Σ_h Σ_j (p_h·e_j)(e_j·q_h)/N."""
    d = E.shape[1] - 1
    q = torch.einsum("hrk,bk->bhr", W_kq, E[:, :, N])
    t = torch.einsum("hr,brj->bhj", W_pv[:, d], E)
    s = torch.einsum("bhr,brj->bhj", q, E)
    return E[:, d, N] + (t * s).sum((1, 2)) / N


def torch_model_loss(E, y_q, W_pv, W_kq, N):
    return 0.5 * ((torch_model_predict(E, W_pv, W_kq, N) - y_q) ** 2).mean()


def torch_prompts(d, N, B, dev, dtype):
    w = torch.randn(B, d, device=dev, dtype=dtype)
    X = torch.randn(B, d, N + 1, device=dev, dtype=dtype)
    y = torch.einsum("bkn,bk->bn", X, w)
    E = torch.cat([X, y.unsqueeze(1)], dim=1)
    E[:, d, N] = 0
    return E, y[:, N]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke test)")
    args = parser.parse_args(argv)
    if not lsa_native.cuda_available():
        print("no CUDA device visible: nothing to measure", file=sys.stderr)
        return 1
    repeats = 3 if args.quick else 7
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []

    def record(size, what, rate, torch_rate):
        vs = None if torch_rate is None else rate / torch_rate
        rows.append({"size": size, "what": what, "per_s": rate, "vs_torch": vs})
        print(f"  {size:<28} {what:<34} {rate:10.1f} /s" + ("" if vs is None else f" ({vs:.1f}x)"),
              flush=True)

    for d, N, H, B in SIZES:
        size = f"d={d} N={N} H={H} B={B}"
        inner = 20 if B <= 4096 else 5
        rng = np.random.default_rng(0)
        W_pv, W_kq = (0.01 * rng.standard_normal((2, H, d + 1, d + 1))).astype(np.float32)
        # 1. the model's loss and gradient on one device batch
        E_t, y_t = torch_prompts(d, N, B, dev, torch.float32)
        Wt = [torch.tensor(a, device=dev, requires_grad=True) for a in (W_pv, W_kq)]

        def torch_lg():
            for w in Wt:
                w.grad = None
            torch_model_loss(E_t, y_t, *Wt, N).backward()
        t_rate = steps_per_second(torch_lg, inner=inner, repeats=repeats, sync=torch.cuda.synchronize)
        record(size, "loss+grad torch autograd f32", t_rate, None)
        E_d, y_d = cuda.to_device(E_t.cpu().numpy()), cuda.to_device(y_t.cpu().numpy())
        Wd = (cuda.to_device(W_pv), cuda.to_device(W_kq))
        n_rate = steps_per_second(lambda: mh.loss_and_grad(E_d, y_d, *Wd), inner=inner,
                                  repeats=repeats, sync=cuda.synchronize)
        record(size, "loss+grad native cuda f32", n_rate, t_rate)
        ref = torch_model_loss(E_t.double(), y_t.double(), *(w.detach().double() for w in Wt), N).item()
        got = mh.loss_and_grad(E_d, y_d, *Wd)[0]
        print(f"  check: native vs torch float64 loss, relative difference {abs(got - ref) / abs(ref):.1e}")
        # the prediction alone (inference; the loss's forward half)
        with torch.no_grad():
            t_rate = steps_per_second(lambda: torch_model_predict(E_t, *Wt, N), inner=inner,
                                      repeats=repeats, sync=torch.cuda.synchronize)
        record(size, "predict torch f32", t_rate, None)
        n_rate = steps_per_second(lambda: mh.predict(E_d, *Wd), inner=inner, repeats=repeats,
                                  sync=cuda.synchronize)
        record(size, "predict native cuda f32", n_rate, t_rate)
        # 2. fresh prompts alone: the GPU sampler into reused buffers vs torch.randn generation
        spec = sampling.LinearPrompts(d, N, seed=1)
        E_buf = cuda.DeviceArray([B, d + 1, N + 1], np.dtype(np.float32), -1)
        y_buf = cuda.DeviceArray([B], np.dtype(np.float32), -1)
        state = {"k": 0}

        def native_prompts():
            spec.sample_embedding(B, state["k"], np.float32, E=E_buf, y_q=y_buf, device="cuda")
            state["k"] += 1
        t_rate = steps_per_second(lambda: torch_prompts(d, N, B, dev, torch.float32), inner=inner,
                                  repeats=repeats, sync=torch.cuda.synchronize)
        record(size, "prompts torch.randn", t_rate, None)
        n_rate = steps_per_second(native_prompts, inner=inner, repeats=repeats, sync=cuda.synchronize)
        record(size, "prompts sample_embedding cuda", n_rate, t_rate)
        # 3. the training step on fresh prompts
        opt_w = [torch.nn.Parameter(torch.tensor(a, device=dev)) for a in (W_pv, W_kq)]
        opt = torch.optim.SGD(opt_w, lr=LR)

        def torch_step():
            E, y = torch_prompts(d, N, B, dev, torch.float32)
            loss = torch_model_loss(E, y, *opt_w, N)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        t_rate = steps_per_second(torch_step, inner=inner, repeats=repeats, sync=torch.cuda.synchronize)
        record(size, "fresh-prompt step torch CUDA loop", t_rate, None)
        W = [W_pv.copy(), W_kq.copy()]
        state = {"k": 0}

        def native_step():
            spec.sample_embedding(B, state["k"], np.float32, E=E_buf, y_q=y_buf, device="cuda")
            _, g_pv, g_kq = mh.loss_and_grad(E_buf, y_buf, W[0], W[1])
            W[0] -= LR * cuda.to_host(g_pv) if not isinstance(g_pv, np.ndarray) else LR * g_pv
            W[1] -= LR * cuda.to_host(g_kq) if not isinstance(g_kq, np.ndarray) else LR * g_kq
            state["k"] += 1
        n_rate = steps_per_second(native_step, inner=inner, repeats=repeats, sync=cuda.synchronize)
        record(size, "fresh-prompt step native cuda", n_rate, t_rate)

    print("\n| size | what | per s | vs torch |")
    print("|---|---|---|---|")
    for r in rows:
        vs = "-" if r["vs_torch"] is None else f"{r['vs_torch']:.1f}x"
        print(f"| {r['size']} | {r['what']} | {r['per_s']:.1f} | {vs} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
