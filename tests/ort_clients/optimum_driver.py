"""optimum programs, unmodified: generation with and without cache and IOBinding, and classification.

Usage: python optimum_driver.py MODELS_DIR OUT.json [PROVIDER]
(MODELS_DIR from optimum_export.py). Writes tokens, logits, the session class and, for dmlshim sessions,
how many gather/scatter nodes ran as DirectML in the last run.
"""

import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import torch
from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSequenceClassification

models, out_path = Path(sys.argv[1]), sys.argv[2]
provider = sys.argv[3] if len(sys.argv) > 3 else "CPUExecutionProvider"
ids = torch.tensor([[5, 17, 42, 99, 3], [7, 8, 150, 2, 61]])
mask = torch.ones_like(ids)
results = {}


def describe(session):
    record = getattr(session, "last_run_record", None)
    return {
        "session_class": f"{type(session).__module__}.{type(session).__qualname__}",
        "providers": session.get_providers(),
        "emulated": None if record is None else len(record.emulated),
    }


cases = [
    ("gpt2_cache", "gpt2_cache", True, False),
    ("gpt2_cache_iobinding", "gpt2_cache", True, True),
    ("gpt2_nocache", "gpt2_nocache", False, False),
    ("gpt2_nocache_iobinding", "gpt2_nocache", False, True),
    ("llama_cache", "llama_cache", True, False),
    ("llama_nocache_iobinding", "llama_nocache", False, True),
]
for name, folder, cache, iobinding in cases:
    model = ORTModelForCausalLM.from_pretrained(
        models / folder, use_cache=cache, use_io_binding=iobinding, provider=provider
    )
    tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    logits = model(input_ids=ids, attention_mask=mask).logits
    results[name] = {
        "tokens": tokens.tolist(),
        "logits": np.asarray(logits.detach()).tolist(),
        **describe(model.session),
    }
classifier = ORTModelForSequenceClassification.from_pretrained(models / "bert", provider=provider)
logits = classifier(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).logits
results["bert_classify"] = {
    "labels": logits.argmax(-1).tolist(),
    "logits": np.asarray(logits.detach()).tolist(),
    **describe(classifier.session),
}
with open(out_path, "w", encoding="utf-8") as handle:
    json.dump(results, handle)
