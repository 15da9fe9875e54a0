"""torch + PEFT's training step on SmolLM2-135M's shape: the peer of `spade bench-model`'s update.

Times forward + backward + AdamW of a per-token advantage-weighted log-prob loss (the policy
gradient term of spade's GRPO loss at ratio 1) at the shapes `spade bench-model --batch B --seq T`
uses: the same token ids (the first quarter a prompt, the rest a completion that is scored), the
same advantages (`i - (B - 1) / 2`, or `--advantage` for a one-sample batch), LoRA r=8, alpha=16
on all seven projections (spade's default) or every weight with `--full`.

Weights: `--model DIR` loads a Hugging Face directory (config.json + safetensors, e.g. one that
`spade` wrote); without it a random model of SmolLM2-135M's shape is built (the timing depends on
the shape, not the values). Loading a GGUF directly needs the `gguf` package, which the CI venv
does not have.

Prints, per run, seconds, tokens/s and CPU utilisation (process CPU time / wall time, 200% is
both cores of this machine), then the process's peak RSS. Run as

    target/serve-venv/bin/python python/bench/train_peer.py --batch 4 --seq 128 --threads 2
"""

import argparse
import resource
import time

import torch


def smollm2_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )


def load_model(path):
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    if path:
        return AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.float32, attn_implementation="sdpa"
        )
    torch.manual_seed(0)
    config = smollm2_config()
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config)


def batch(b, t, advantage):
    """spade bench-model's update batch: ids, completion mask, per-row advantages."""
    half = t // 4
    prompt = [(17 * k + 3) % 1000 + 100 for k in range(half)]
    ids, mask = [], []
    for i in range(b):
        completion = [200 + ((k * 7 + i) % 1000) for k in range(t - half)]
        ids.append(prompt + completion)
        mask.append([0.0] * half + [1.0] * (t - half))
    if b == 1:
        if advantage is None:
            raise SystemExit("a one-sample batch needs --advantage (its group advantage is 0)")
        adv = [advantage]
    else:
        adv = [i - (b - 1) / 2 for i in range(b)]
    return torch.tensor(ids), torch.tensor(mask), torch.tensor(adv)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="Hugging Face model directory (default: random SmolLM2 shape)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--advantage", type=float, help="advantage of a one-sample batch")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2, help="updates timed (the first pays warm-up)")
    args = ap.parse_args()
    if args.batch < 1 or args.seq < 4:
        raise SystemExit("--batch must be at least 1 and --seq at least 4")
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    if not args.full:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(
                r=args.rank,
                lora_alpha=2 * args.rank,
                lora_dropout=0.0,
                target_modules=[
                    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"
                ],
            ),
        )
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    ids, mask, adv = batch(args.batch, args.seq, args.advantage)
    tokens = args.batch * args.seq
    kind = "full" if args.full else f"LoRA r={args.rank}"
    print("| update | tokens | seconds | tokens/s | CPU % |")
    print("|---|---|---|---|---|")
    for run in range(args.runs):
        wall, cpu = time.perf_counter(), time.process_time()
        logits = model(input_ids=ids).logits[:, :-1]
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        m = mask[:, 1:]
        loss = -(adv[:, None] * logp * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        secs = time.perf_counter() - wall
        util = 100.0 * (time.process_time() - cpu) / secs
        print(
            f"| torch+PEFT {kind} ({args.batch}x{args.seq}), run {run + 1} | {tokens} "
            f"| {secs:.2f} | {tokens / secs:.1f} | {util:.0f} |"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
