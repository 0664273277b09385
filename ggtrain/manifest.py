"""The reproducibility manifest at the top of every run directory (``manifest.json``)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax

from ggtrain.machine import host_record
from models.artifacts import sha256_file

PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "grain",
    "tensorboardX",
    "jraph",
    "gin-config",
    "numpy",
    "safetensors",
    "tokenizers",
    "alfworld",
    "textworld",
    "ggtrain",
)
ROOT = Path(__file__).resolve().parents[1]


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _git() -> dict[str, Any]:
    def run(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        return {"commit": run("rev-parse", "HEAD"), "dirty": bool(run("status", "--porcelain"))}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def model_hashes(model_dir: Path) -> dict[str, str]:
    names = ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"]
    files = [model_dir / n for n in names] + sorted(model_dir.glob("*.safetensors"))
    return {f.name: sha256_file(f) for f in files if f.exists()}


def game_list_hash(games: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(games)).encode()).hexdigest()


class Manifest:
    def __init__(self, path: Path, data: dict[str, Any]):
        self.path, self.data = path, data

    @classmethod
    def open(cls, run_dir: Path, config: dict[str, Any], seeds: dict[str, int]) -> Manifest:
        """Creates the manifest, or reopens it on resume: a restart is logged, the first start kept, and
        ``ended`` cleared until the run finishes again (a resume may add iterations)."""
        path = run_dir / "manifest.json"
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if path.exists():
            manifest = cls(path, json.loads(path.read_text()))
            manifest.data["ended"] = None
            # the code, and the machine (whose CPU decides a run's last bits), may have changed since
            manifest.event("restart", command=sys.argv, git=_git(), machine=host_record())
            return manifest
        data = {
            "started": now,
            "ended": None,
            "command": sys.argv,
            "packages": _versions(),
            "python": sys.version.split()[0],
            "jax": {
                "backend": jax.default_backend(),
                "devices": [str(d) for d in jax.devices()],
                "process_count": jax.process_count(),
            },
            "git": _git(),
            "machine": host_record(),  # XLA:CPU results follow the vector extensions
            "config": config,
            "seeds": seeds,
            "model_files": {},
            "game_lists": {},
            "events": [],
        }
        manifest = cls(path, data)
        manifest.save()
        return manifest

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def event(self, kind: str, **details: Any) -> None:
        self.data["events"].append({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": kind} | details)
        self.save()

    def save(self) -> None:
        if jax.process_index() != 0:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        tmp.replace(self.path)


def record_evaluation(folder: Path, config: dict[str, Any], seeds: dict[str, Any], **details: Any) -> None:
    """An evaluation folder's ``manifest.json`` (``ggtrain eval --out``): created by the folder's first
    evaluation, then one ``evaluation`` event per evaluation written there. Each is recorded once it has
    ended; the manifest's ``started`` is when the first one began (its ``started`` detail, if given)."""
    path = folder / "manifest.json"
    if path.exists():
        manifest = Manifest(path, json.loads(path.read_text()))
    else:
        manifest = Manifest.open(folder, config, seeds)
        manifest.data["started"] = details.get("started", manifest.data["started"])
    manifest.event("evaluation", command=sys.argv, git=_git(), **details)
    manifest.set("ended", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
