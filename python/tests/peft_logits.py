"""Logits of a spade model and its LoRA adapter under Hugging Face transformers and peft: the
check that spade's adapters are PEFT adapters (tests/all/peft.rs).

argv: base_dir adapter_dir ids_json. base_dir is `checkpoint::save_full`'s HF directory,
adapter_dir `checkpoint::save_lora`'s. Prints one JSON object: the last position's logits of the
base model and of the base with the adapter, for the token ids in ids_json (a list of ints).
"""

import json
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

base_dir, adapter_dir, ids_path = sys.argv[1:4]
ids = torch.tensor([json.load(open(ids_path))])
model = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
model.eval()
with torch.no_grad():
    base = model(input_ids=ids).logits[0]
adapted_model = PeftModel.from_pretrained(model, adapter_dir)
adapted_model.eval()
with torch.no_grad():
    adapted = adapted_model(input_ids=ids).logits[0]
print(json.dumps({"base": base.tolist(), "adapted": adapted.tolist()}))
