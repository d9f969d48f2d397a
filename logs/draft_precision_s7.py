"""Seventh session: where a round's time goes at bf16, depth 3, budget 32, with the draft in bf16, in fp32, or on one
thread (the target on two). Four training prompts only (never eval/). Run: PYTHONPATH=. python logs/draft_precision_s7.py
[DRAFT_FOLDER] [--profile]"""
import json, sys

import torch

import poss_core.decoding.decoder as D
from poss_core.models.loading import load_preset_target, load_draft_by_name
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import SpeculativeDecoder, PlainDecoder, encode_prompt
from poss_core.decoding.events import RoundEvent
torch.set_num_threads(2)
t = load_preset_target("builtin:smollm2-135m", dtype=torch.bfloat16)
rows = [json.loads(l) for l in open("../shared/data/train/self_instruct_user_oriented.jsonl")][:4]
prompts = [encode_prompt(t.tokenizer, r["instruction"] + "\n" + r["instances"][0]["input"]) for r in rows]
cfg = DecodeConfig(depth=3, top_k=10, tree_budget=32, max_new_tokens=64)
def lane(dec):
    d, v, w, n = [], [], [], 0
    for p in prompts:
        for ev in dec.generate(p):
            if isinstance(ev, RoundEvent) and not ev.prefill:
                d.append(ev.draft_ms); v.append(ev.verify_ms); w.append(ev.wall_ms); n += len(ev.tokens)
    return sum(d), sum(v), sum(w), n, len(w)
def report(name, r):
    d, v, w, n, k = r
    print(f"{name:14s} rounds {k:4d} tokens {n:4d} draft/round {d/k:6.2f} verify/round {v/k:6.2f} "
          f"other/round {(w-d-v)/k:5.2f} wall/round {w/k:6.2f} tok/s {1000*n/w:5.1f}", flush=True)
folder = next((a for a in sys.argv[1:] if not a.startswith("--")), "assets/drafts/smollm2-135m/eagle")
draft_bf, draft_fp = load_draft_by_name(folder, t), load_draft_by_name(folder, t)
draft_fp.to(torch.float32); draft_fp.bind_target(t.input_embedding_weight(), t.lm_head_weight(), copy_embedding=False)
_bt = D.build_tree
class OneThread(SpeculativeDecoder):
    """The draft's tree on one thread, the target on two (the decoder calls the module's build_tree)."""
    def generate(self, ids):
        def bt(*a, **k):
            torch.set_num_threads(1)
            try:
                return _bt(*a, **k)
            finally:
                torch.set_num_threads(2)
        D.build_tree = bt
        try:
            yield from super().generate(ids)
        finally:
            D.build_tree = _bt
lanes = {"spec-draft1thr": OneThread(t, draft_bf, cfg), "ar": PlainDecoder(t, cfg), "spec-bf16": SpeculativeDecoder(t, draft_bf, cfg),
         "spec-fp32draft": SpeculativeDecoder(t, draft_fp, cfg)}
for dec in lanes.values(): lane(dec)  # warm-up
for rep in range(2):
    for name, dec in lanes.items(): report(name, lane(dec))
if "--profile" in sys.argv:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        lane(lanes["spec-bf16"])
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
