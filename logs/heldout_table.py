"""Print the README's held-out rows for stage NEW against stage OLD on both held-out slices
(results/<tag>-selfeval-decoding*.json, results/<tag>-longeval*.json), and how many b-phase entries rose, stayed level
or fell. Usage (from the repository root): python logs/heldout_table.py NEW OLD"""
import glob, json, sys
new, old = sys.argv[1], sys.argv[2]
LABEL = {"eagle": "EAGLE (1 layer)", "poss2": "POSS-2 (3 specialists)", "poss3": "POSS-3 (2 specialists)",
         "matched": "matched (3 stacked layers)"}
def load(tag, kind):
    out = {}
    for f in glob.glob(f"results/{tag}-{kind}*.json"):
        for r in json.load(open(f))["results"]:
            phase = "a" if r["drafts"].endswith(f"{tag}a-export") else "b"
            out[(phase, r["method"])] = r["top1_by_position"]
    return out
up = down = level = 0
for kind, name in (("selfeval-decoding", "self-written (64)"), ("longeval", "long documents (43)")):
    n, o = load(new, kind), load(old, kind)
    for phase, m in [("a", "eagle"), ("a", "matched"), ("b", "eagle"), ("b", "poss2"), ("b", "poss3"), ("b", "matched")]:
        if (phase, m) not in n:
            continue
        v = n[(phase, m)]; w = o.get((phase, m))
        label = LABEL[m] if phase == "b" else f"{LABEL[m].split(' (')[0]}, {new}a"
        d = ""
        if w:
            deltas = [100 * (a - b) for a, b in zip(v, w)]
            d = f"{min(deltas):+.1f}..{max(deltas):+.1f}"
            if phase == "b":
                up += sum(x > 0.05 for x in deltas); down += sum(x < -0.05 for x in deltas); level += sum(abs(x) <= 0.05 for x in deltas)
        print(f"| {name} | {label} | " + " | ".join(f"{x:.3f}" for x in v) + f" | {d} |")
print(f"b-phase entries: up {up}, level {level}, down {down}")
