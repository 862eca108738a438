"""Our batches in real Hugging Face causal LMs (GPT-2, Llama; random init, vocabulary 258).

The documented call is ``model(input_ids=b["input_ids"], position_ids=b["position_ids"],
use_cache=False)`` with our ``token_nll`` on ``b["shift_labels"]`` (or HF's own loss given
``labels=`` and ``shift_labels=`` both ``b["shift_labels"]``), for padded and packed batches
alike; the common undocumented calls are right or fail loudly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from reader import PackedSampler, WindowDataset, collate, collate_packed, token_nll
from tests.common.reader_data import VOCAB, random_docs, write_docs

transformers = pytest.importorskip("transformers")


SEQ = 24


def gpt2() -> Any:
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2,
                                     n_head=4, attn_implementation="sdpa")
    return transformers.GPT2LMHeadModel(config)


def llama() -> Any:
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=SEQ,
                                      attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(config)


MODELS = {"gpt2": gpt2, "llama": llama}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> WindowDataset:
    root = tmp_path_factory.mktemp("hf") / "ds"
    write_docs(root, random_docs(30, max_len=40), window=SEQ, stride=16, score_new=True,
               num_shards=2)
    return WindowDataset(root)


def build(name: str, attn: str = "sdpa") -> Any:
    torch.manual_seed(0)
    model = MODELS[name]()
    model.config._attn_implementation = attn
    return model.double().eval()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_documented_call_gives_our_loss_padded_and_packed(dataset: WindowDataset,
                                                              name: str, attn: str) -> None:
    model = build(name, attn)
    ds = dataset
    windows = [ds[i] for i in range(len(ds))]
    padded = collate(windows, pad_id=ds.eos_id)
    rows = next(iter(PackedSampler(ds.lengths, len(ds), SEQ, seed=0)))
    packed = collate_packed(ds.__getitems__(rows), seq_len=SEQ, pad_id=ds.eos_id)
    assert any(len(r) > 1 for r in rows)
    results = []
    with torch.no_grad():
        for batch in (padded, packed):
            out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                        use_cache=False)
            nll_sum, count = token_nll(out.logits, batch["shift_labels"])
            assert count == batch["num_targets"] == ds.scored_targets
            hf = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                       use_cache=False, labels=batch["shift_labels"],
                       shift_labels=batch["shift_labels"]).loss
            assert abs(float(hf) - float(nll_sum) / count) < 1e-6  # HF upcasts to float32
            results.append(float(nll_sum))
    # Packed (HF builds the block-diagonal mask from position_ids) equals unpacked.
    assert abs(results[0] - results[1]) < 1e-9 * abs(results[0])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_common_calls_are_right_or_loud(dataset: WindowDataset, name: str) -> None:
    model = build(name)
    ds = dataset
    batch = collate([ds[i] for i in range(8)], pad_id=ds.eos_id)
    rows = next(iter(PackedSampler(ds.lengths, len(ds), SEQ, seed=0)))
    packed = collate_packed(ds.__getitems__(rows), seq_len=SEQ, pad_id=ds.eos_id)
    assert any(len(r) > 1 for r in rows)
    with torch.no_grad():
        for b in (batch, packed):
            # labels=batch["labels"]: a KeyError that names the fix, never HF's second shift.
            with pytest.raises(KeyError, match=r"shift_labels"):
                model(input_ids=b["input_ids"], labels=b["labels"])
            # model(**batch): right logits (HF ignores our extra keys), and no loss.
            out = model(**b)
            ref = model(input_ids=b["input_ids"], position_ids=b["position_ids"],
                        use_cache=False)
            assert out.loss is None
            real = b["attention_mask"] == 1 if "attention_mask" in b else b["segment_ids"] >= 0
            assert torch.allclose(out.logits[real], ref.logits[real], rtol=0, atol=1e-12)
        # Packed rows with a 2-D all-ones mask, or with HF's default KV cache, let windows
        # read each other: why a packed batch has no attention_mask and says use_cache=False.
        ids, pos = packed["input_ids"], packed["position_ids"]
        right = model(input_ids=ids, position_ids=pos, use_cache=False).logits
        ones = torch.ones_like(ids)
        leaky = model(input_ids=ids, position_ids=pos, attention_mask=ones, use_cache=False)
        assert float((leaky.logits - right).abs().max()) > 1e-3
        cached = model(input_ids=ids, position_ids=pos).logits
        assert float((cached - right).abs().max()) > 1e-3


def test_the_bug_the_issue_names_is_what_labels_would_do(dataset: WindowDataset,
                                                        tmp_path: Path) -> None:
    """HF's own shift of our labels scores fewer, wrong targets: what the KeyError prevents."""
    model = build("gpt2")
    batch = collate([dataset[i] for i in range(len(dataset))], pad_id=dataset.eos_id)
    with torch.no_grad():
        wrong = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      labels=batch["shift_labels"]).loss
        logits = model(input_ids=batch["input_ids"]).logits
    nll_sum, count = token_nll(logits, batch["shift_labels"])
    shifted_again = batch["shift_labels"][:, 1:]
    assert int((shifted_again != -100).sum()) < count  # each row's first target is lost
    assert abs(float(wrong) - float(nll_sum) / count) > 1e-5
