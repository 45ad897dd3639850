"""Where the time of one lsa_native.torch Adam step on CUDA goes (LSA full output, d = 20, N = 100,
B = 8192, float32): torch.profiler over a few steps, the native calls marked with record_function,
host and device totals per op. For a GPU machine: python bench/gpu/profile_torch_loop.py"""
import functools
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import lsa_native.torch as lt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_torch import adam_step  # noqa: E402  (the loop bench/report_torch.py times)

d, N, B = 20, 100, 8192
for name in ("forward", "vjp", "predict", "predict_vjp"):
    fn = getattr(lt._lsa, name)

    @functools.wraps(fn)
    def marked(*a, _fn=fn, _name=name, **k):
        with record_function("lsa_native." + _name):
            return _fn(*a, **k)

    setattr(lt._lsa, name, marked)
lt._predict_vjp = lt._lsa.predict_vjp

E = torch.randn((B, d + 1, N + 1), device="cuda")
E[:, d, N] = 0
y = torch.randn(B, device="cuda")
for output in ("full", "prediction"):
    step = adam_step(lt.LinearSelfAttention(d, output=output, seed=0).cuda(), E, y)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    print(f"=== output={output}: 5 steps")
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=14, max_name_column_width=44))
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=44))
