"""One GRPO step of TRL's GRPOTrainer, unchanged, with `SpadeToolEnv.factory(url)` as its
`environment_factory` (or, with `inprocess:ENV.py` instead of a URL, the in-process
`spade.trl.SandboxToolEnv`, recording to out_dir/traj), on a tiny random Qwen3 model and
tokenizer that this script writes.

So that the model calls the tool at all, it is first taught (a few hundred supervised steps) to
answer any prompt with one fixed tool call to `reply`. Then one GRPO step runs through a real
`spade serve`. Prints one JSON object: the rewards TRL logged and the episode ids the
environments played, for the caller to compare with the server's trajectories.

argv: url|inprocess:ENV.py env_id out_dir
"""

import json
import os
import random
import sys

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import qwen3_chat_template  # noqa: E402

url, env_id, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
if url.startswith("inprocess:"):
    from spade.trl import SandboxToolEnv as ToolEnv  # noqa: E402

    with open(url.removeprefix("inprocess:")) as f:
        envs = {env_id: f.read()}
    os.makedirs(os.path.join(out_dir, "traj"), exist_ok=True)
    factory_args = (envs,)
    factory_kwargs = {"record_dir": os.path.join(out_dir, "traj")}
else:
    from spade_client import SpadeToolEnv as ToolEnv  # noqa: E402

    factory_args, factory_kwargs = (url,), {}
torch.manual_seed(0)
random.seed(0)

# A byte-level tokenizer with no merges: every byte is a token, plus Qwen3's special tokens.
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
            "<tool_response>", "</tool_response>", "<think>", "</think>"]
alphabet = pre_tokenizers.ByteLevel.alphabet()
vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
raw.decoder = decoders.ByteLevel()
raw.add_special_tokens(SPECIALS)
tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>")
tokenizer.chat_template = qwen3_chat_template

config = Qwen3Config(
    vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
    tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
)
model = Qwen3ForCausalLM(config)

# Teach the one answer: after the prompt TRL renders (the tool's schema in the system prompt,
# the dataset's message and the first observation), the tool call below, then <|im_end|>.
CALL = '<tool_call>\n{"name": "reply", "arguments": {"message": "\\\\boxed{a}"}}\n</tool_call><|im_end|>'
target = tokenizer(CALL, add_special_tokens=False)["input_ids"]
tool_schema = [get_json_schema(ToolEnv(*factory_args).reply)]
# Many user messages, so that the model learns to ignore what the user says (TRL appends the
# first observation to the dataset's message).
WORDS = ["play", "the", "game", "say", "word", "apple", "river", "stone", "cloud", "in", "\\boxed{}",
         "through", "reply", "tool", "."]
prompts = []
for _ in range(64):
    content = random.choice(["", " ", "\n", "\n\n"]).join(
        " ".join(random.choice(WORDS) for _ in range(random.randrange(2, 12))) for _ in range(2)
    )
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tools=tool_schema, add_generation_prompt=True, tokenize=False
    )
    prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
model.train()
for step in range(300):
    batch = [random.choice(prompts) + target for _ in range(4)]
    width = max(len(b) for b in batch)
    ids = torch.full((len(batch), width), tokenizer.pad_token_id)
    labels = torch.full((len(batch), width), -100)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
        start = len(seq) - len(target)
        labels[row, start : len(seq)] = torch.tensor(target)
    loss = model(input_ids=ids, labels=labels).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
model.eval()

rows = [{"prompt": [{"role": "user", "content": "Play the game."}], "env_id": env_id, "seed": s} for s in range(4)]
played = []


class RecordingToolEnv(ToolEnv):
    """The tool environment as is; the episode ids it played are kept for the caller's check."""

    def reset(self, **kwargs):
        text = super().reset(**kwargs)
        played.append(self.episode_id)
        return text


args = GRPOConfig(
    output_dir=out_dir, per_device_train_batch_size=4, num_generations=2, max_completion_length=96,
    max_steps=1, learning_rate=1e-5, logging_steps=1, report_to=[], use_cpu=True, bf16=False,
    seed=0, save_strategy="no", temperature=0.3, log_completions=True,
)
trainer = GRPOTrainer(
    model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
    environment_factory=RecordingToolEnv.factory(*factory_args, **factory_kwargs),
)
trainer.train()
logged = [entry for entry in trainer.state.log_history if "rewards/RecordingToolEnv/mean" in entry]
print(json.dumps({
    "reward_mean": logged[0]["rewards/RecordingToolEnv/mean"] if logged else None,
    "reward_keys": sorted(k for k in trainer.state.log_history[0] if k.startswith("reward")),
    "episodes": played,
    "sft_loss": float(loss.detach()),
}))
