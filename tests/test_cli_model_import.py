"""`ggtrain model import-gguf GGUF_PATH OUT_DIR` on the real SmolLM2 GGUF."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ggtrain.cli import main


@pytest.mark.slow
def test_import_gguf_writes_a_loadable_hf_directory(tmp_path, capsys, smollm):
    from models import load_pretrained
    from models.artifacts import fetch

    out = tmp_path / "smollm"
    assert main(["model", "import-gguf", str(fetch("smollm2-135m-instruct-gguf")), str(out)]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(files)
    lm = load_pretrained(out)
    ids = np.asarray([lm.tokenizer.encode("Hello there")])
    np.testing.assert_array_equal(np.asarray(lm.logits(ids)), np.asarray(smollm.logits(ids)))


def test_missing_gguf_is_a_one_line_error(tmp_path, capsys):
    assert main(["model", "import-gguf", str(tmp_path / "nope.gguf"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "nope.gguf" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_non_gguf_file_is_refused(tmp_path, capsys):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"NOTGGUF" + b"\0" * 64)
    assert main(["model", "import-gguf", str(bad), str(tmp_path / "out")]) == 2
    assert "not a GGUF file" in capsys.readouterr().err
