"""HF directory I/O: a tiny random Qwen2 from transformers, loaded, saved and reloaded both ways."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from models import load_pretrained

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

IDS = np.array([[3, 17, 256, 9, 44, 301, 2, 5], [8, 8, 100, 400, 12, 1, 0, 77]])


def _hf_logits(model_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor(IDS)).logits.numpy()


def test_tiny_qwen2_logits_match_transformers(tiny_qwen2_dir):
    lm = load_pretrained(tiny_qwen2_dir)
    assert lm.config.model_type == "qwen2" and lm.config.attention_bias and not lm.config.tie_word_embeddings
    assert lm.config.rope_theta == 1e6
    np.testing.assert_allclose(np.asarray(lm.logits(IDS)), _hf_logits(tiny_qwen2_dir), atol=1e-4, rtol=0)


def test_our_save_loads_in_transformers(tiny_qwen2_dir, tmp_path):
    lm = load_pretrained(tiny_qwen2_dir)
    lm.save(tmp_path)
    np.testing.assert_allclose(_hf_logits(tmp_path), np.asarray(lm.logits(IDS)), atol=1e-4, rtol=0)


def test_round_trip_is_bit_exact_single_and_sharded(tiny_qwen2_dir, tmp_path):
    from safetensors.numpy import load_file

    original = load_file(str(tiny_qwen2_dir / "model.safetensors"))
    lm = load_pretrained(tiny_qwen2_dir)
    lm.save(tmp_path / "single")
    lm.save(tmp_path / "sharded", max_shard_bytes=100_000)
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    resaved = load_file(str(tmp_path / "single" / "model.safetensors"))
    assert set(resaved) == set(original)
    for name, tensor in original.items():
        assert resaved[name].dtype == tensor.dtype
        np.testing.assert_array_equal(resaved[name], tensor, err_msg=name)
    reloaded = load_pretrained(tmp_path / "sharded")
    for a, b in zip(
        np.asarray(lm.logits(IDS)).ravel()[:50], np.asarray(reloaded.logits(IDS)).ravel()[:50], strict=True
    ):
        assert a == b


def test_bf16_round_trip_is_bit_exact(tiny_qwen2_dir, tmp_path):
    from safetensors.numpy import load_file

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    lm = load_pretrained(tmp_path / "bf16")
    lm.save(tmp_path / "out")
    a, b = (
        load_file(str(tmp_path / "bf16" / "model.safetensors")),
        load_file(str(tmp_path / "out" / "model.safetensors")),
    )
    for name in a:
        assert b[name].dtype == a[name].dtype
        np.testing.assert_array_equal(b[name].view(np.uint16), a[name].view(np.uint16), err_msg=name)


def test_missing_tensor_names_file_and_tensor(tiny_qwen2_dir, tmp_path):
    from safetensors.numpy import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(tiny_qwen2_dir, bad)
    tensors = load_file(str(bad / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(
        ValueError, match=r"model\.safetensors: tensor 'model\.layers\.1\.self_attn\.k_proj\.bias' is missing"
    ):
        load_pretrained(bad)


def test_misshaped_tensor_names_file_and_tensor(tiny_qwen2_dir, tmp_path):
    from safetensors.numpy import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(tiny_qwen2_dir, bad)
    tensors = load_file(str(bad / "model.safetensors"))
    tensors["model.norm.weight"] = np.ones(63, tensors["model.norm.weight"].dtype)
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(ValueError, match=r"tensor 'model\.norm\.weight' has shape \(63,\), expected \(64,\)"):
        load_pretrained(bad)


def test_unknown_architecture_is_refused_by_name(tiny_qwen2_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_qwen2_dir, bad)
    config = json.loads((bad / "config.json").read_text())
    config["architectures"] = ["MistralForCausalLM"]
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"architecture 'MistralForCausalLM'.*not supported"):
        load_pretrained(bad)
