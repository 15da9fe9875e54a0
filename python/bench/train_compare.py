"""spade's RL update against torch + PEFT's, alternated in one run: the table of issue 56.

For each shape (`BxT`, or `1xT` with an advantage), each round runs `spade bench-model
--update-only` and `train_peer.py` (its peer: same shapes, token ids, advantages and LoRA
targets) one after the other, swapping which goes first every round so both see the same load,
and keeps each side's last (warm) update of the round. Prints per shape and kind (LoRA, full)
the median seconds, tokens/s, CPU utilisation and peak RSS of each side, spade's bytes per
token, and the ratios (spade's speed over torch's, spade's peak over torch's). Run as

    target/serve-venv/bin/python python/bench/train_compare.py --spade target/release/spade \\
        --shapes 4x128 --full --rounds 3
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# `| GRPO update, LoRA r=8 (4x128, blockwise attention, fused ops, checkpointed layers), run 2 | 512 | 5.1 | 100.0 | 180 | 4300 | 9000 |`
SPADE_LINE = re.compile(
    r"^\| GRPO update, (LoRA r=\d+|full) \(\d+x\d+, \w+ attention, \w+ ops, \w+ layers\), run (\d+) \| (\d+) \| "
    r"([\d.]+) \| ([\d.]+) \| (\d+) \| (\d+) \| (\d+) \|$"
)
# `| torch+PEFT LoRA r=8 (4x128), run 2 | 512 | 2.25 | 227.0 | 190 |`
TORCH_LINE = re.compile(
    r"^\| torch\+PEFT (LoRA r=\d+|full) \(\d+x\d+\), run (\d+) \| (\d+) \| ([\d.]+) \| "
    r"([\d.]+) \| (\d+) \|$"
)
TORCH_PEAK = re.compile(r"^peak RSS: (\d+) MiB$")


def parse_shape(text):
    m = re.fullmatch(r"(\d+)x(\d+)", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 4:
        raise SystemExit(f"a shape is BxT with B >= 1 and T >= 4, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def parse_spade(out):
    """The last run of each kind: kind -> (seconds, tokens/s, CPU %, peak MiB, bytes/token)."""
    last = {}
    for line in out.splitlines():
        m = SPADE_LINE.match(line.strip())
        if m:
            kind = "full" if m.group(1) == "full" else "LoRA"
            last[kind] = tuple(float(m.group(i)) for i in (4, 5, 6, 7, 8))
    return last


def parse_torch(out):
    """The last run: (seconds, tokens/s, CPU %, peak MiB)."""
    run, peak = None, None
    for line in out.splitlines():
        m = TORCH_LINE.match(line.strip())
        if m:
            run = tuple(float(m.group(i)) for i in (4, 5, 6))
        p = TORCH_PEAK.match(line.strip())
        if p:
            peak = float(p.group(1))
    if run is None or peak is None:
        raise RuntimeError(f"train_peer.py printed no update line:\n{out}")
    return run + (peak,)


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spade", default="target/release/spade", help="the spade binary")
    ap.add_argument("--python", default=sys.executable, help="the Python that has torch and peft")
    ap.add_argument("--shapes", nargs="+", default=["4x128"], help="BxT update shapes")
    ap.add_argument("--advantage", type=float, default=1.0, help="advantage of a 1xT batch")
    ap.add_argument("--full", action="store_true", help="also full fine-tuning")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2, help="updates per process (the last is kept)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spade-arg", action="append", default=[], help="extra bench-model argument")
    args = ap.parse_args()
    if args.rounds < 1 or args.runs < 1:
        raise SystemExit("--rounds and --runs must be at least 1")
    kinds = ["LoRA", "full"] if args.full else ["LoRA"]
    print(f"load average at start: {open('/proc/loadavg').read().strip()}")
    print(
        "| update | torch s (tok/s) | torch CPU % | torch peak MiB | spade s (tok/s) "
        "| spade CPU % | spade peak MiB | spade bytes/token | speed ratio | memory ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        b, t = parse_shape(shape)
        common = ["--batch", str(b), "--seq", str(t)]
        if b == 1:
            common += ["--advantage", str(args.advantage)]
        spade_cmd = [args.spade, "bench-model", "--update-only", "--update-runs", str(args.runs)]
        spade_cmd += common + (["--full"] if args.full else []) + args.spade_arg
        torch_cmds = {
            kind: [args.python, os.path.join(HERE, "train_peer.py"), "--threads", str(args.threads),
                   "--runs", str(args.runs)] + common + (["--full"] if kind == "full" else [])
            for kind in kinds
        }
        spade_runs = {k: [] for k in kinds}
        torch_runs = {k: [] for k in kinds}
        for r in range(args.rounds):
            steps = ["spade", "torch"] if r % 2 == 0 else ["torch", "spade"]
            for step in steps:
                if step == "spade":
                    got = parse_spade(run(spade_cmd))
                    for k in kinds:
                        if k not in got:
                            raise RuntimeError(f"spade printed no {k} update for {shape}")
                        spade_runs[k].append(got[k])
                else:
                    for k in kinds:
                        torch_runs[k].append(parse_torch(run(torch_cmds[k])))
        for k in kinds:
            s = [statistics.median(col) for col in zip(*spade_runs[k])]
            p = [statistics.median(col) for col in zip(*torch_runs[k])]
            print(
                f"| {k}, {b} x {t} | {p[0]:.2f} ({p[1]:.0f}) | {p[2]:.0f} | {p[3]:.0f} "
                f"| {s[0]:.2f} ({s[1]:.0f}) | {s[2]:.0f} | {s[3]:.0f} | {s[4]:.0f} "
                f"| {p[0] / s[0]:.2f}x | {s[3] / p[3]:.2f}x |",
                flush=True,
            )
    print(f"load average at end: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
