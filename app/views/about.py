"""The About tab: speculative decoding, EAGLE and POSS for a class, one diagram, the metric definitions, the
hardware."""

from __future__ import annotations

from app.server.server_text import neutral_paths
from poss_core.models.quantization import CPU_PLAIN_SPEED_RANGE

INTRO = """
### Speculative decoding in one minute
A large language model writes one token per forward pass, and on most hardware that pass is limited by moving the
weights, not by arithmetic: checking several tokens costs about as much as writing one. **Speculative decoding**
lets a small, cheap **draft** guess the next few tokens; the big **target** model then scores all the guesses in
*one* forward pass and keeps the longest prefix it agrees with, plus one token of its own (the **bonus** token, or
the **correction** where the draft went wrong). At temperature 0 the output is exactly what the target alone would
write, token for token; with sampling, a verification rule keeps the exact same distribution. Only the speed changes.

### EAGLE
EAGLE's draft is a single transformer layer that works on the target's *features* (its last hidden state) rather
than on tokens: from the feature at position *t* and the next token it predicts the feature at *t+1*, and the
target's own LM head turns that into a token distribution. EAGLE-2 grows a **tree** of guesses (the best `top_k`
branches at each depth, pruned to a node budget) so that one verification pass tries many continuations at once.

### POSS: position-specialised drafts
At draft position 1 the draft reads a true target feature. At position 2 it reads its *own* prediction, at position
3 a prediction of a prediction... errors pile up, and acceptance falls with depth. **POSS** (position
specialists) gives each block of positions its own draft layer, a **specialist**, trained on exactly the error
level it will see there. POSS-*n* means each specialist covers *n* consecutive positions (POSS-1 with depth 6
has 6 specialists, POSS-2 has 3, POSS-3 has 2). Each position still runs *one* layer, so drafting costs about what
EAGLE's does, but not the same: each specialist keeps its own cache, so it also reads the newly committed tokens and
the tree rows drafted before its positions. With the paper's tree (fp32, 2-core CPU) a round's drafting took 38 ms
for EAGLE, 40 ms for POSS-3, 42 ms for POSS-2 and 48 ms for POSS-1, against about 177 ms for verifying the tree.
The **matched-capacity control** stacks the same number of layers and runs all of them at every position
(68 ms of drafting a round), to separate "more parameters" from "specialisation".

### Two differences, two questions
POSS's specialists are trained on the draft's own errors: each later position is unrolled on the draft's own
predicted features, as decoding will feed it (HASS's idea). EAGLE's layer is trained teacher-forced. So **POSS minus
EAGLE** mixes two effects: the training on one's own errors, and the specialisation. The **HASS control** (`hass`)
separates them: EAGLE's one layer, started from the same EAGLE layer, trained with POSS-2's unroll, steps and
batches. **POSS minus hass** is what specialisation adds; **POSS minus EAGLE** is the whole method. The Evidence tab
gives both, with their intervals.

### What the bundled drafts show (SmolLM2-135M, six evaluation sets, 60 questions)
* Along the target's own continuation (chains from every position), every draft's feature deviation grows with
  draft position, as the paper says: EAGLE's L2 from 21.5 at position 1 to 25.4 at position 6; the drafts trained
  on their own errors (POSS and hass) end lower (25.0 to 25.1). POSS-1, POSS-2, POSS-3 and hass are level from
  position 3 on: the specialists do not lower the deviation beyond what the training does.
* POSS-1 (one specialist per position) accepts 2.5% more than EAGLE (τ 3.10 against 3.02, interval +0.8 to +4.3%)
  and 1.8% more than hass (+0.4 to +3.1%); POSS-3 1.5% more than hass (+0.0 to +2.9%); POSS-2's 0.5% is not
  resolved. POSS-1 over POSS-2 (+1.3%) or POSS-3 (+0.3%) is not resolved either: on this small target
  specialisation adds a little beyond training on one's own errors, and six specialists add no clear gain over two
  or three while drafting the longest. The matched control, three layers at every position, leads everything by
  7–10%. These are what was measured; the Evidence tab has every figure with its interval.

### What to look at in the demo
* Token colours: shaded tokens were guessed by the draft and accepted; the shade says at which draft position (or
  by which specialist). Underlined tokens are the target's own. Struck-through tokens are drafts the target rejected.
* The tree: every token the draft proposed in a round, by depth. The thick path is what the target accepted.
  Click a token (or Tab to it and press Enter) to see the tree of the round it came from.
* Position-wise acceptance: POSS's claim is that its curve stays higher at late positions than EAGLE's. One prompt
  is a few dozen rounds; "Charts show: all my runs" pools every run of this tab on the model, per method, so the
  curves firm up as you try more prompts.
"""

# Why the speed-ups on the page differ (the Demo under its lanes, the Evidence tab beside its speed charts).
SPEED_STORY = (
    "**Why speed-ups differ:** a speed-up depends on the tree (the Demo's small default, or the paper's larger one, "
    "which a CPU verifies slowly), the precision (bfloat16 is faster than float32 on a CPU with bf16 units), the "
    "machine, and whether it ran live here or is a recording made on another machine; so every speed figure names "
    "its machine, tree and precision, while τ and acceptance do not depend on the machine."
)

METRICS = f"""
### Metric definitions
* **Round**: one draft-then-verify step. **accept_len**: draft tokens accepted in a round (0 .. depth).
* **τ (mean acceptance length)** = mean over rounds of (accept_len + 1): tokens produced per target forward pass.
  Plain decoding has τ = 1. Counts stop at the answer's end: in the round where the answer ends, tokens the target
  accepted past the end-of-answer token (or the token limit) are not part of the answer and are not counted.
  (EAGLE's web UI calls it the "compression ratio".)
* **Conditional position-wise acceptance (POSS "pos-acc")**: pos-acc<sub>k</sub> is, of the rounds that accepted
  positions 1 .. k−1 and drafted position *k*, the share that accepted *k*. A round whose tree stopped before *k*
  (a depth stop or the node budget) counts neither as an acceptance nor as a rejection there. The Demo's default
  tree grows every round to the full depth and then keeps only its best-scored nodes (the node budget), so a round
  reaches the deepest positions only where its best paths stay likely: the strip under the acceptance chart shows
  the share of rounds that drafted each position. Where every round drafts the whole depth,
  pos-acc<sub>k</sub> = P(accept_len ≥ k) / P(accept_len ≥ k−1) and the chain rule holds:
  P(accept_len ≥ k) = Π<sub>i≤k</sub> pos-acc<sub>i</sub>, so one weak position caps everything after it.
* **Unconditional per-position rate**: of the rounds that drafted position *k*, the share that accepted at least
  *k* tokens (vLLM's accepted-per-position / drafts). Every chart says which one it shows, and the strip under it
  the share of rounds that drafted each position.
* **Feature deviation** at position *k*: the distance (mean L2 norm, and cosine distance 1 − cos) between the
  draft's predicted feature and the target's true feature for the same token. The charts measure it **along the
  target's own continuation**: once the answer is known, the draft is rolled forward from **every position** of it
  over the tokens the target wrote, on its own predicted features as in decoding, and each position is compared
  with the target's feature there (no extra target forward; untimed; one batched pass per answer). Every start
  counts at every position, so nothing is left out. The same measured from round roots only (the Evidence tab's
  picker) starts where the last draft had just failed, which is not a sample of the text. Measured on *accepted*
  positions only, the deviation is conditional on acceptance: deep positions keep only the easy rounds, and the
  curve can fall with depth for that reason alone.
* **Tokens/s**: new tokens over the lane's own compute time (prefill included). **Speed-up** = a lane's tokens/s ÷
  the plain lane's tokens/s, same target, same hardware, same prompt and max tokens, batch 1.
* Lanes **race in time** on one machine, one round at a time: the lane that has spent the least of its own time
  goes next, and a lane shows a round only once every lane has spent that long, so at every moment each lane shows
  what it decoded in the same time and token counts stand in the ratio of the lanes' speeds. Each lane's time is
  the sum of its own rounds, so its speed is what it would get alone; a replay plays on the same clock at its
  recorded speed. **Step** instead runs one round of every lane. Every chart states its sample size (rounds): a few
  rounds are anecdotes.

### Identity with plain decoding, precision and quantization
At temperature 0 every lane must write exactly what the plain lane writes. That rests on one property of the
target's arithmetic: a token's result must not depend on the other tokens in the same forward pass, because plain
decoding runs one token at a time and verification runs the whole tree at once.
* **On a CPU, every precision** has it, with the target's row-invariant attention (the default): a row attends to
  whole blocks of keys and a tail in plain decoding's order, and a lone row's matrix products are padded past the
  vector path, so its logits are the same bits alone, in a prompt chunk or among tree siblings, in float32,
  bfloat16 and float16. Every lane is identical to plain decoding, and any difference would be a real mismatch (a
  bug), which the badge would say.
* **bfloat16 / float16 with transformers' fused attention** (a GPU, unless `POSS_ATTENTION=row-invariant`; a CPU
  with `python app.py --attention sdpa`, which is faster) round a batched and a one-token product differently, so
  where the target's two best tokens are within a fraction of a logit (0.5 in bf16) a lane can take the other one:
  a **rounding near-tie**. The badge then says from which token the lane differs, with the plain target's own
  logit margin there in its tooltip.
* **4-bit NF4** targets dequantize their weights and multiply in the compute dtype, so in float32 every lane is
  identical. (bitsandbytes' fused CPU kernel would round the activations to bfloat16, and a float32 target would
  behave like a bfloat16 one: 4 of 6 test runs parted from plain decoding.)
* **8-bit** targets round every activation to int8. They use LLM.int8 *without* its outlier split, which picks
  outlier columns from the whole batch so that the tree's other rows change a row's result (a lane parted from
  plain decoding at the first token). Even so, identity is not exact: a last-digit difference between a tree's
  attention and a one-token step can flip one int8 rounding, and that grows layer by layer into logit
  differences of up to about 2. A lane then parts from plain decoding where plain's two best tokens were that close:
  the badge says "int8 rounding noise" with plain's margin. This is the quantization's batch dependence, not a bug,
  and it is why a batched verifier of an int8 model cannot promise the plain int8 model's exact text.
* The drafts are trained on the full-precision target's features, and a quantized target writes a somewhat different
  text: on the six evaluation sets (2 questions each, 128 tokens) EAGLE's τ was 3.35 in float32, 3.15 in 8-bit and
  3.52 in 4-bit, and POSS-2 kept its small lead in each. On a CPU a quantized target saves memory, not time: plain
  decoding ran at {CPU_PLAIN_SPEED_RANGE} float32's tokens/s, although the tree's speed-up over it grew (its
  dequantizing cost is paid once per forward, whatever the rows).
"""

DIAGRAM = """
<div class="poss-diagram">
<svg viewBox="0 0 760 250" xmlns="http://www.w3.org/2000/svg" role="img"
     aria-label="One round: the draft proposes a tree of tokens, positions handled by specialists, the target verifies
     the tree in one forward pass and keeps the longest accepted prefix plus its own token.">
  <style>
    .t { font: 13px sans-serif; fill: currentColor; }
    .s { font: 11px sans-serif; fill: currentColor; opacity: 0.8; }
    .box { fill: none; stroke: currentColor; stroke-opacity: 0.5; rx: 6; }
    .edge { stroke: currentColor; stroke-opacity: 0.35; stroke-width: 1.5; fill: none; }
    .acc { stroke: #D55E00; stroke-width: 3.5; fill: none; }
  </style>
  <text class="t" x="10" y="22">1. draft: one cheap layer per position group (specialists S1, S2, S3)</text>
  <rect x="60" y="40" width="120" height="22" fill="#0072B2" fill-opacity="0.35" rx="4"/>
  <rect x="190" y="40" width="120" height="22" fill="#E69F00" fill-opacity="0.35" rx="4"/>
  <rect x="320" y="40" width="120" height="22" fill="#009E73" fill-opacity="0.35" rx="4"/>
  <text class="s" x="70" y="56">S1: positions 1-2</text>
  <text class="s" x="200" y="56">S2: positions 3-4</text>
  <text class="s" x="330" y="56">S3: positions 5-6</text>
  <circle cx="30" cy="130" r="9" fill="#8a8f98"/><text class="s" x="6" y="155">root</text>
  <path class="acc" d="M39 130 L 90 105 L 150 105 L 210 105"/>
  <path class="edge" d="M39 130 L 90 160 M90 105 L150 135 M150 105 L210 130 M90 160 L150 185"/>
  <circle cx="90" cy="105" r="9" fill="#0072B2"/><circle cx="90" cy="160" r="7" fill="#0072B2" fill-opacity="0.4"/>
  <circle cx="150" cy="105" r="9" fill="#0072B2"/><circle cx="150" cy="135" r="6" fill="#0072B2" fill-opacity="0.4"/>
  <circle cx="150" cy="185" r="6" fill="#0072B2" fill-opacity="0.4"/>
  <circle cx="210" cy="105" r="9" fill="#E69F00"/><circle cx="210" cy="130" r="6" fill="#E69F00" fill-opacity="0.4"/>
  <path class="edge" d="M210 105 L270 105 M270 105 L330 105"/>
  <circle cx="270" cy="105" r="7" fill="#E69F00" fill-opacity="0.4"/>
  <circle cx="330" cy="105" r="6" fill="#009E73" fill-opacity="0.4"/>
  <polygon points="270,118 279,127 270,136 261,127" fill="#D55E00"/>
  <path class="acc" d="M210 105 L 262 127"/>
  <text class="s" x="285" y="140">target's token (correction)</text>
  <text class="t" x="470" y="95">2. target: one forward pass</text>
  <text class="s" x="470" y="113">scores every drafted node at once</text>
  <text class="s" x="470" y="129">(tree attention mask)</text>
  <text class="t" x="470" y="160">3. keep the longest agreed prefix</text>
  <text class="s" x="470" y="178">+ one token of the target's own:</text>
  <text class="s" x="470" y="194">here 3 accepted + 1 = 4 tokens for one pass</text>
  <rect class="box" x="460" y="75" width="285" height="130"/>
  <text class="s" x="10" y="235">Thick vermillion: the accepted path. Faded: rejected. Colour: the specialist.</text>
</svg>
</div>
"""


def plain_markdown(text: str) -> str:
    """`text` as literal characters in Markdown: every character other than a letter, digit or space becomes an HTML
    character reference, so no link, image, table cell, autolink or HTML can form from it (a saved run's `hardware`
    is text from a file)."""
    return "".join(c if c.isalnum() or c == " " else f"&#{ord(c)};" for c in text[:200])


def hardware_markdown(info: dict[str, str] | None, note: str = "") -> str:
    """The hardware, dtype and quantization in use (filled once a model is loaded)."""
    if not info:
        return "### Hardware in use\nNo model loaded yet: the first Run loads it." + (f"\n\n{note}" if note else "")
    rows = "\n".join(f"| {plain_markdown(k)} | {plain_markdown(neutral_paths(str(v)))} |" for k, v in info.items())
    return f"### Hardware in use\n| setting | value |\n|---|---|\n{rows}" + (f"\n\n{note}" if note else "")
