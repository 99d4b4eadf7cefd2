#!/usr/bin/env python3
"""PyTorch's figures for the benchmark's add-one chain: eager launches against a
torch.cuda.CUDAGraph captured once and replayed.

Per row, a chain of K dependent "add one" kernels over E float32 elements ping-pongs
between two buffers A and B (kernel i reads A and writes B when i is even, the other way
when odd; K is even, so the result ends in A): `torch.add(a, 1, out=b)`, then
`torch.add(b, 1, out=a)`, ... Each pass starts from a reset (not timed) and ends with a
full `.cpu()` read-back of A, which is checked: A == start + K exactly. Eager and replay
passes are interleaved, one of each per round, and each figure is the median over the
rounds (at least 5).

Rows: E=64 with K=150, 1000, 5000 (launch-bound), and the controls E=65536 K=1000,
E=1048576 K=500.

Columns: eager and replay microseconds per kernel (a pass's host time, start through
read-back, over K), their ratio (eager / replay), the graph's node count (counted with
the driver's cuGraphGetNodes where this torch exposes the captured graph, else K,
marked "assumed"), and replay microseconds per node.

Needs CUDA and torch, no network. Without either it prints a `SKIP:` line and exits 0,
unless CUDA is required (CAPTURE_REQUIRE_CUDA=1, as the GPU bundle's run.sh sets it):
then a torch that sees no CUDA device is a failure (`FAILED:`, exit 1), so the step never
reads green on a machine whose GPU PyTorch cannot use.

    python3 xtask/gpu/torch_graph.py [--json] [--rounds N]
"""

import argparse
import ctypes
import json
import statistics
import sys
import time

ROWS = [(64, 150), (64, 1000), (64, 5000), (65536, 1000), (1048576, 500)]
MIN_ROUNDS = 5


def skip(why):
    print(f"SKIP: torch_graph.py: {why}")
    sys.exit(0)


def cuda_required():
    """Whether the caller requires CUDA (CAPTURE_REQUIRE_CUDA=1)."""
    import os

    return os.environ.get("CAPTURE_REQUIRE_CUDA") == "1"


def graph_nodes(graph):
    """The captured graph's node count via cuGraphGetNodes, or None when this torch does
    not expose the cudaGraph_t (raw_cuda_graph with keep_graph=True) or the driver call
    fails."""
    raw = getattr(graph, "raw_cuda_graph", None)
    if raw is None:
        return None
    try:
        handle = raw()
        libcuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_size_t(0)
        code = libcuda.cuGraphGetNodes(ctypes.c_void_p(handle), None, ctypes.byref(count))
        return count.value if code == 0 else None
    except (OSError, RuntimeError, AttributeError, TypeError):
        return None


def new_graph(torch):
    """A CUDAGraph that keeps its cudaGraph_t for counting, where this torch allows."""
    try:
        return torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        return torch.cuda.CUDAGraph()


def run_row(torch, elements, kernels, rounds):
    if kernels % 2:
        raise ValueError(f"K={kernels}: the chain must end in A, so K is even")
    device = torch.device("cuda")
    start = (torch.arange(elements, dtype=torch.int64) % 1000 - 500).to(torch.float32)
    expected = start + kernels
    start_dev = start.to(device)
    a = torch.empty(elements, dtype=torch.float32, device=device)
    b = torch.empty(elements, dtype=torch.float32, device=device)

    def reset():
        a.copy_(start_dev)
        b.zero_()
        torch.cuda.synchronize()

    def chain():
        for i in range(kernels):
            if i % 2 == 0:
                torch.add(a, 1, out=b)
            else:
                torch.add(b, 1, out=a)

    def check(out, what):
        if not torch.equal(out, expected):
            bad = (out != expected).nonzero()[0].item()
            raise AssertionError(
                f"E={elements} K={kernels} {what}: element {bad} is {out[bad].item()}, "
                f"expected {expected[bad].item()}"
            )

    # Warm-up on a side stream (as torch's CUDA graph docs ask), then capture once.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            chain()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = new_graph(torch)
    with torch.cuda.graph(graph):
        chain()
    torch.cuda.synchronize()
    # Counted before the first replay (a graph that kept its cudaGraph_t is instantiated
    # by its first replay, which is untimed).
    nodes = graph_nodes(graph)
    # One untimed pass of each.
    for replay in (False, True):
        reset()
        if replay:
            graph.replay()
        else:
            chain()
        check(a.cpu(), "warm-up")

    eager, replayed = [], []
    for _ in range(rounds):
        reset()
        t0 = time.perf_counter()
        chain()
        out = a.cpu()
        eager.append(time.perf_counter() - t0)
        check(out, "eager")
        reset()
        t0 = time.perf_counter()
        graph.replay()
        out = a.cpu()
        replayed.append(time.perf_counter() - t0)
        check(out, "replay")

    eager_us = statistics.median(eager) * 1e6
    replay_us = statistics.median(replayed) * 1e6
    counted = nodes is not None
    nodes = nodes if counted else kernels
    return {
        "row": f"E={elements} K={kernels}",
        "elements": elements,
        "kernels": kernels,
        "rounds": rounds,
        "eager_us_per_kernel": eager_us / kernels,
        "replay_us_per_kernel": replay_us / kernels,
        "ratio": eager_us / replay_us,
        "nodes": nodes,
        "nodes_counted": counted,
        "replay_us_per_node": replay_us / nodes,
        "eager_pass_us": eager_us,
        "replay_pass_us": replay_us,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--rounds",
        type=int,
        default=7,
        help=f"interleaved rounds per row (at least {MIN_ROUNDS}; default 7)",
    )
    args = parser.parse_args()
    rounds = max(args.rounds, MIN_ROUNDS)
    try:
        import torch
    except ImportError as e:
        skip(f"torch is not installed ({e})")
    if not torch.cuda.is_available():
        if cuda_required():
            print("FAILED: torch_graph.py: CUDA is required (CAPTURE_REQUIRE_CUDA=1) and "
                  f"torch {torch.__version__} sees no CUDA device")
            sys.exit(1)
        skip("torch sees no CUDA device")

    rows = [run_row(torch, e, k, rounds) for e, k in ROWS]
    device = torch.cuda.get_device_name(0)
    if args.json:
        print(
            json.dumps(
                {
                    "device": device,
                    "torch": torch.__version__,
                    "cuda": torch.version.cuda,
                    "rows": rows,
                },
                indent=2,
            )
        )
        return
    print(f"device: {device}; torch {torch.__version__}, CUDA {torch.version.cuda}; "
          f"median of {rounds} interleaved rounds, read-back of A included")
    header = ("row", "eager µs/kernel", "replay µs/kernel", "ratio", "nodes",
              "replay µs/node")
    print(f"{header[0]:<18} {header[1]:>16} {header[2]:>17} {header[3]:>7} "
          f"{header[4]:>14} {header[5]:>15}")
    for r in rows:
        nodes = str(r["nodes"]) + ("" if r["nodes_counted"] else " (assumed)")
        print(f"{r['row']:<18} {r['eager_us_per_kernel']:>16.3f} "
              f"{r['replay_us_per_kernel']:>17.3f} {r['ratio']:>7.2f} {nodes:>14} "
              f"{r['replay_us_per_node']:>15.3f}")


if __name__ == "__main__":
    main()
