"""The tree forward, the cache commit and the specialist routing."""

import torch

from poss_core.decoding.decoder import encode_prompt
from poss_core.decoding.tree import build_tree
from poss_core.models.draft import DraftSpec, DraftState
from poss_core.models.loading import random_draft
from poss_core.models.target import causal_allowed, keep_cache_slots


def _prefilled(target, draft, prompt="Tell me a story about a cat."):
    ids = torch.tensor(encode_prompt(target.tokenizer, prompt))
    cache = target.new_cache()
    out = target.forward(ids, torch.arange(len(ids)), causal_allowed(len(ids), 0), cache, logits="last")
    root = int(out.logits[-1].argmax())
    state = DraftState(draft)
    state.add_rows(torch.cat([ids[1:], torch.tensor([root])]), out.hidden)
    return ids, cache, root, state


def _path(tree, i):
    path, parents = [], tree.parents.tolist()
    while i >= 0:
        path.append(int(tree.tokens[i]))
        i = parents[i]
    return path[::-1]


def test_tree_forward_matches_each_path_alone(tiny_target, trained_drafts):
    target = tiny_target
    ids, cache, root, state = _prefilled(target, trained_drafts["poss2"])
    tree = build_tree(trained_drafts["poss2"], state, depth=5, top_k=4, tree_budget=30)
    assert tree.size == 29 and int(tree.depths.max()) >= 3
    n = len(ids) + 1
    allowed = torch.ones(tree.size + 1, n + tree.size, dtype=torch.bool)
    allowed[:, n - 1 :] = tree.ancestors()
    out = target.forward(
        torch.cat([torch.tensor([root]), tree.tokens]),
        n - 1 + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths]),
        allowed,
        cache,
    )
    for i in range(tree.size):
        seq = torch.cat([ids, torch.tensor([root] + _path(tree, i))])
        alone = target.model(seq[None]).logits[0, -1]
        assert torch.allclose(out.logits[i + 1], alone, atol=1e-4), f"node {i}"
        hidden_alone = target.model(seq[None], output_hidden_states=True).hidden_states[-1][0, -1]
        assert torch.allclose(out.hidden[i + 1], hidden_alone, atol=1e-4)


def test_commit_keeps_exactly_the_accepted_path(tiny_target, trained_drafts):
    target = tiny_target
    ids, cache, root, state = _prefilled(target, trained_drafts["eagle"])
    tree = build_tree(trained_drafts["eagle"], state, depth=4, top_k=3, tree_budget=12)
    n = len(ids) + 1
    allowed = torch.ones(tree.size + 1, n + tree.size, dtype=torch.bool)
    allowed[:, n - 1 :] = tree.ancestors()
    target.forward(
        torch.cat([torch.tensor([root]), tree.tokens]),
        n - 1 + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths]),
        allowed,
        cache,
    )
    # Commit a deep, non-contiguous path: the deepest node and its ancestors.
    leaf = int(torch.argmax(tree.depths))
    chain, parents = [], tree.parents.tolist()
    i = leaf
    while i >= 0:
        chain.append(i)
        i = parents[i]
    chain = chain[::-1]
    keep_cache_slots(cache, n - 1, torch.tensor([0] + [c + 1 for c in chain]))
    seq = torch.cat([ids, torch.tensor([root]), tree.tokens[chain]])
    ref = target.new_cache()
    target.forward(seq, torch.arange(len(seq)), causal_allowed(len(seq), 0), ref)
    assert cache.get_seq_length() == len(seq)
    for a, b in zip(cache.layers, ref.layers):
        assert torch.allclose(a.keys, b.keys, atol=1e-5)
        assert torch.allclose(a.values, b.values, atol=1e-5)


def test_routing_poss2_depth6(tiny_target):
    draft = random_draft(tiny_target, "poss2", depth=6)
    assert draft.num_specialists == 3
    assert [draft.specialist_of(p) for p in range(1, 7)] == [0, 0, 1, 1, 2, 2]
    assert draft.specialist_of(7) == 2 and draft.specialist_of(20) == 2  # past the last: the last specialist
    eagle = random_draft(tiny_target, "eagle")
    assert {eagle.specialist_of(p) for p in range(1, 9)} == {0}
    poss1 = random_draft(tiny_target, "poss1", depth=6)
    assert [poss1.specialist_of(p) for p in range(1, 9)] == [0, 1, 2, 3, 4, 5, 5, 5]


def test_tree_nodes_record_their_specialist(tiny_target):
    draft = random_draft(tiny_target, "poss2", depth=6)
    _, _, _, state = _prefilled(tiny_target, draft)
    tree = build_tree(draft, state, depth=6, top_k=2, tree_budget=40)
    for d, g in zip(tree.depths.tolist(), tree.specialists.tolist()):
        assert g == draft.specialist_of(d)


def test_topk_one_gives_a_chain(tiny_target):
    draft = random_draft(tiny_target, "poss3", depth=6)
    _, _, _, state = _prefilled(tiny_target, draft)
    tree = build_tree(draft, state, depth=6, top_k=1, tree_budget=60)
    assert tree.depths.tolist() == [1, 2, 3, 4, 5, 6]
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3, 4]


def test_budget_prunes_to_best_scores_and_keeps_a_tree(tiny_target):
    draft = random_draft(tiny_target, "poss1", depth=6)
    _, _, _, state = _prefilled(tiny_target, draft)
    tree = build_tree(draft, state, depth=6, top_k=10, tree_budget=60)
    assert tree.size == 59
    parents = tree.parents.tolist()
    for i, p in enumerate(parents):
        assert p < i  # parents before children
        if p >= 0:
            assert tree.scores[p] >= tree.scores[i]
            assert tree.depths[p] == tree.depths[i] - 1


def test_draft_state_rows_are_read_by_every_specialist(tiny_target):
    draft = random_draft(tiny_target, "poss3", depth=6)
    _, _, _, state = _prefilled(tiny_target, draft)
    build_tree(draft, state, depth=6, top_k=3, tree_budget=20)
    # After a round every specialist's cache holds exactly the context rows (tree rows dropped).
    assert state.read == [state.num_rows] * draft.num_specialists
    for g in range(draft.num_specialists):
        assert state.cache_len(g) == state.num_rows
    assert DraftSpec("poss", 2, 3).label.startswith("POSS-3")


def test_decoding_path_of_a_specialist_matches_the_transformers_layers(tiny_target):
    """`run_specialist` with a `DraftKV` (fused weights, RoPE table, in-place cache, bool mask) computes what the
    transformers layers compute with a DynamicCache and a float mask: a context call, then rows that see only part of
    what precedes them (a tree), for EAGLE, POSS and the stacked control (whose later layers keep their input norm)."""
    from transformers import DynamicCache

    from poss_core.models.draft import DraftKV
    from poss_core.models.target import float_mask

    g = torch.Generator().manual_seed(0)
    for kind in ("eagle", "poss2", "matched"):
        draft = random_draft(tiny_target, kind, depth=6)
        with torch.no_grad():
            for p in draft.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=g))  # non-trivial norms and biases
        h = draft.config.hidden_size
        for group in range(draft.num_specialists):
            slow, fast = DynamicCache(), DraftKV(len(draft.layers))
            ctx = 7
            tokens = torch.randint(0, 90, (1, ctx), generator=g)
            feats = torch.randn(1, ctx, h, generator=g)
            pos = torch.arange(ctx)[None]
            allowed = causal_allowed(ctx, 0)
            with torch.inference_mode():
                a = draft.run_specialist(group, tokens, feats, pos, float_mask(allowed, feats.dtype), slow)
                b = draft.run_specialist(group, tokens, feats, pos, allowed, fast)
                assert torch.allclose(a, b, atol=1e-5), kind
                # Three tree rows at the same depth, each seeing the context and itself only.
                tokens = torch.randint(0, 90, (1, 3), generator=g)
                feats = torch.randn(1, 3, h, generator=g)
                pos = torch.full((1, 3), ctx)
                allowed = torch.cat([torch.ones(3, ctx, dtype=torch.bool), torch.eye(3, dtype=torch.bool)], dim=1)
                a = draft.run_specialist(group, tokens, feats, pos, float_mask(allowed, feats.dtype), slow)
                b = draft.run_specialist(group, tokens, feats, pos, allowed, fast)
                assert torch.allclose(a, b, atol=1e-5), kind
            assert fast.lengths[draft.groups[group][0]] == ctx + 3


def test_the_slab_cache_grows_and_commits_like_a_dynamic_cache(tiny_target):
    """The target's cache keeps every layer in one growing buffer: forwards in chunks that outgrow it, a commit of a
    chain (kept slots first: nothing moves) and of a scattered path give the caches a plain DynamicCache gives."""
    from transformers import DynamicCache

    from poss_core.models.target import SlabLayer

    target = tiny_target
    g = torch.Generator().manual_seed(3)
    seq = torch.randint(0, 90, (420,), generator=g)
    slab, plain = target.new_cache(), DynamicCache(config=target.config)
    assert all(isinstance(layer, SlabLayer) for layer in slab.layers)
    for cache in (slab, plain):
        for a in range(0, 300, 100):  # the first chunk reserves 256 rows: the third outgrows them
            target.forward(seq[a : a + 100], torch.arange(a, a + 100), causal_allowed(100, a), cache, logits="none")
    assert slab.layers[0].slab.data.shape[-2] >= 300
    for keep in (torch.arange(4), torch.tensor([0, 2, 5, 6])):
        for cache in (slab, plain):
            target.forward(seq[300:308], torch.arange(300, 308), causal_allowed(8, 300), cache, logits="none")
            keep_cache_slots(cache, 300, keep)
        for a, b in zip(slab.layers, plain.layers):
            assert a.keys.shape == b.keys.shape and torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
        for cache in (slab, plain):  # back to 300 rows for the next case
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys[..., :300, :], layer.values[..., :300, :]
    out_slab = target.forward(seq[300:310], torch.arange(300, 310), causal_allowed(10, 300), slab, logits="all")
    out_plain = target.forward(seq[300:310], torch.arange(300, 310), causal_allowed(10, 300), plain, logits="all")
    assert torch.allclose(out_slab.logits, out_plain.logits, atol=1e-5)
