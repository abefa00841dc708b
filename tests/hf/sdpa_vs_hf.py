"""bench/peers/roformer_sdpa.py (RoFormer on torch's scaled_dot_product_attention) gives transformers'
RoFormerModel last_hidden_state to 1e-4 in fp32, on small random models with padding:
  a RoFormerModel saved bare, embedding_size != hidden_size (embeddings_project), gelu;
  a RoFormerForMaskedLM saved with `roformer.*` names and its MLM head, rotary_value, gelu_new, type ids 1;
and the all-ones mask (SDPA unmasked) gives what the explicit mask path gives. A model whose
max_position_embeddings is shorter than the batch is refused.
Usage: sdpa_vs_hf.py WORK_DIR (run by tests/hf/sdpa_peer.sh, which skips without torch 2).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peers"))
from roformer_sdpa import load_roformer_sdpa  # noqa: E402


def check(name, cls, work, **config):
    from transformers import RoFormerConfig
    torch.manual_seed(len(name))
    cfg = RoFormerConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=48, max_position_embeddings=40,
                         initializer_range=0.3, **config)  # scores far from 0: the rotation matters
    model = cls(cfg).eval()
    with torch.no_grad():  # LayerNorms away from (1, 0), so that loading them is tested too
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)
    path = os.path.join(work, name)
    model.save_pretrained(path, safe_serialization=True)
    hf = getattr(model, "roformer", model)
    ours = load_roformer_sdpa(path)

    B, T = 3, 23
    ids = torch.randint(0, cfg.vocab_size, (B, T))
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, 17:] = 0  # right padding, as transformers' tokenizers make it
    mask[2, 5:] = 0
    types = torch.zeros_like(ids)
    types[:, T // 2:] = 1
    worst = 0.0
    with torch.no_grad():
        for m in (mask, torch.ones_like(mask)):
            want = hf(input_ids=ids, attention_mask=m, token_type_ids=types).last_hidden_state
            got = ours(ids, attention_mask=m, token_type_ids=types)
            diff = (want - got).abs().max().item()
            worst = max(worst, diff)
            assert diff <= 1e-4, "%s: max |diff| %.3g against transformers" % (name, diff)
        padded = ours(ids, attention_mask=mask, token_type_ids=types)
        unpadded_row = ours(ids[1:2, :17], attention_mask=mask[1:2, :17], token_type_ids=types[1:2, :17])
        diff = (padded[1:2, :17] - unpadded_row).abs().max().item()
        assert diff <= 1e-5, "%s: padding changes the real tokens' outputs by %.3g" % (name, diff)
        try:
            ours(torch.zeros(1, 41, dtype=torch.int64))
            raise AssertionError("%s: 41 tokens over max_position_embeddings 40 were not refused" % name)
        except ValueError as e:
            assert "max_position_embeddings 40" in str(e), str(e)
    print("%s: max |diff| %.2e against transformers' RoFormerModel (fp32)" % (name, worst))


def main(work):
    from transformers import RoFormerForMaskedLM, RoFormerModel
    torch.set_num_threads(1)
    check("bare-projected", RoFormerModel, work, embedding_size=24)
    check("mlm-rotary-value", RoFormerForMaskedLM, work, rotary_value=True, hidden_act="gelu_new")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
