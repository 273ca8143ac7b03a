"""A communication-bound DDP step, fp32 against bf16 gradient all-reduce, in one run.

    python benchmarks/allreduce.py [--params-m 25] [--steps 4]

Two CPU processes on gloo train a ~25M-parameter model on a tiny batch, so the all-reduce
dominates. First over plain loopback (the link is not the bottleneck there and the casts
cost CPU time), then, when run as root with iproute2, with the two ranks in network
namespaces joined by a veth pair shaped by `tc` to 1 Gbit/s: the regime of nodes without
NVLink. The namespaces and their addresses exist only for the benchmark's lifetime.
Prints one JSON line per figure (DESIGN.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

NETNS = ("pm-bench-0", "pm-bench-1")
VETH = ("pm-veth0", "pm-veth1")
ADDRESSES = ("192.168.213.1", "192.168.213.2")


emit = figure_printer("allreduce")


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from polymimic_strategies import make_bf16_compress_hook

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://{args.master}:{args.port}", rank=args.rank, world_size=2
    )
    width = 2048
    layers = max(1, round(args.params_m * 1e6 / (width * width + width)))
    torch.manual_seed(0)
    model = DistributedDataParallel(
        nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))
    )
    if args.hook == "bf16":
        model.register_comm_hook(None, make_bf16_compress_hook())
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(2, width)

    def step() -> None:
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    for _ in range(2):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    elapsed = (time.perf_counter() - start) / args.steps
    params = sum(p.numel() for p in model.parameters())
    if args.rank == 0:
        print(json.dumps({"step_s": elapsed, "params": params}), flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_pair(hook: str, args: argparse.Namespace, shaped: bool) -> dict:
    port = _free_port()
    procs = []
    for rank in range(2):
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "--rank",
            str(rank),
            "--hook",
            hook,
            "--port",
            str(port),
            "--params-m",
            str(args.params_m),
            "--steps",
            str(args.steps),
        ]
        env = dict(os.environ)
        if shaped:
            cmd = ["ip", "netns", "exec", NETNS[rank], *cmd, "--master", ADDRESSES[0]]
            env["GLOO_SOCKET_IFNAME"] = VETH[rank]
        else:
            cmd += ["--master", "127.0.0.1"]
            env["GLOO_SOCKET_IFNAME"] = "lo"
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a {hook} worker failed (exit codes {[p.returncode for p in procs]})")
    return json.loads(outputs[0].strip().splitlines()[-1])


def compare(args: argparse.Namespace, shaped: bool) -> None:
    prefix = "shaped_" if shaped else ""
    best: dict[str, float] = {}
    params = 0
    for _ in range(args.rounds):  # interleaved, best of each
        for hook in ("fp32", "bf16"):
            result = run_pair(hook, args, shaped)
            params = result["params"]
            best[hook] = min(best.get(hook, float("inf")), result["step_s"])
    link = "veth shaped to 1 Gbit/s" if shaped else "loopback"
    if not shaped:
        emit("bytes_per_step_fp32", params * 4, "bytes", params=params)
        emit("bytes_per_step_bf16", params * 2, "bytes", params=params)
    emit(f"{prefix}step_s_fp32", best["fp32"], "s", link=link)
    emit(f"{prefix}step_s_bf16", best["bf16"], "s", link=link)
    goal = {"goal": "<= 0.6"} if shaped else {}
    emit(
        f"{prefix}step_time_ratio_bf16_over_fp32",
        best["bf16"] / best["fp32"],
        "ratio",
        link=link,
        **goal,
    )


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def setup_shaped_link() -> None:
    for ns in NETNS:
        _ip("netns", "add", ns)
    _ip("link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1])
    for ns, dev, addr in zip(NETNS, VETH, ADDRESSES, strict=True):
        _ip("link", "set", dev, "netns", ns)
        _ip("netns", "exec", ns, "ip", "addr", "add", f"{addr}/30", "dev", dev)
        _ip("netns", "exec", ns, "ip", "link", "set", dev, "up")
        _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "tc",
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                "1gbit",
                "burst",
                "256kb",
                "latency",
                "100ms",
            ],
            check=True,
            capture_output=True,
        )


def teardown_shaped_link() -> None:
    for ns in NETNS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--hook", default="fp32", help=argparse.SUPPRESS)
    parser.add_argument("--master", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--params-m", type=float, default=25.0, help="model size, millions")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    compare(args, shaped=False)
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print(
            "shaped link skipped: needs root with iproute2 (ip, tc) for network namespaces",
            file=sys.stderr,
        )
        return
    teardown_shaped_link()  # leftovers of an interrupted run
    try:
        setup_shaped_link()
    except subprocess.CalledProcessError as exc:
        print(
            f"shaped link skipped: could not set up namespaces ({exc.stderr.strip()})",
            file=sys.stderr,
        )
        teardown_shaped_link()
        return
    try:
        compare(args, shaped=True)
    finally:
        teardown_shaped_link()


if __name__ == "__main__":
    main()
