"""PyTorch's CPU matmul on the shapes gemm_bench times, one thread, fp32 and bf16.

    build/bench/gemm_bench/gemm_bench --shapes-only | python3 bench/gemm_bench/torch_matmul.py

Reads 'model|product|m|n|k|op_a|op_b' lines; prints a markdown table of GFLOP/s per core. The
bf16 inputs are converted before timing (fleetps's bf16 products convert inside the call).
"""
import sys
import time

import torch

torch.set_num_threads(1)


def operand(rows, cols, op, dtype):
    stored = torch.rand(rows, cols) if op == "N" else torch.rand(cols, rows)
    stored = stored.to(dtype)
    return stored if op == "N" else stored.t()  # a transposed view, as a row-major BLAS call sees it


def best_seconds(f, min_s=0.3):
    f()
    best, start, runs = 1e9, time.perf_counter(), 0
    while runs < 5 or time.perf_counter() - start < min_s:
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
        runs += 1
    return best


print(f"PyTorch {torch.__version__}, 1 thread; backends: mkldnn {torch.backends.mkldnn.is_available()}")
print("| model | product | m x n x k | PyTorch fp32 | PyTorch bf16 |")
print("|---|---|---|---:|---:|")
flop_sum = t32_sum = t16_sum = 0.0
for line in sys.stdin:
    model, what, m, n, k, op_a, op_b = line.strip().split("|")
    m, n, k = int(m), int(n), int(k)
    flop = 2.0 * m * n * k
    row = []
    for dtype in (torch.float32, torch.bfloat16):
        a, b = operand(m, k, op_a, dtype), operand(k, n, op_b, dtype)
        out = torch.empty(m, n, dtype=dtype)
        t = best_seconds(lambda: torch.matmul(a, b, out=out))
        row.append(t)
    flop_sum += flop
    t32_sum += row[0]
    t16_sum += row[1]
    print(f"| {model} | {what} | {m}x{n}x{k} | {flop / row[0] / 1e9:.1f} | {flop / row[1] / 1e9:.0f} |")
print(f"| all | every product above, summed | | {flop_sum / t32_sum / 1e9:.1f} | {flop_sum / t16_sum / 1e9:.0f} |")
