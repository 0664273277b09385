"""The machine block every benchmark JSON and every run manifest records (ggtrain/machine.py)."""

from __future__ import annotations

import json

from ggtrain.machine import machine_record, parse_cpuinfo

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw amx_tile amx_bf16 avx512_bf16
processor\t: 1
model name\t: something else
flags\t\t: fpu
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes sve sve2 bf16 i8mm
CPU implementer\t: 0x41
"""


def test_parse_cpuinfo_x86_first_processor_and_known_flags_only():
    info = parse_cpuinfo(X86)
    assert info["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert info["vector_extensions"] == [
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "avx512f",
        "avx512bw",
        "avx512_bf16",
        "amx_tile",
        "amx_bf16",
    ]


def test_parse_cpuinfo_arm_features():
    info = parse_cpuinfo(ARM)
    assert info["cpu_model"] == ""
    assert info["vector_extensions"] == ["asimd", "sve", "sve2", "bf16", "i8mm"]


def test_machine_record_is_json_and_names_cpu_and_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    record = json.loads(json.dumps(machine_record()))
    assert record["cpu"]["cpu_model"]
    assert record["cpu"]["cpu_count"] >= record["cpu"]["usable_cpus"] >= 1
    assert record["threads"]["OMP_NUM_THREADS"] == "3"
    assert "XLA_FLAGS" in record["threads"]


def test_a_run_manifest_records_the_machine_at_its_start_and_every_restart(tmp_path):
    from ggtrain.machine import cpu_record
    from ggtrain.manifest import Manifest

    Manifest.open(tmp_path, {"seed": 0}, {"run": 0})
    Manifest.open(tmp_path, {"seed": 0}, {"run": 0})  # a resume
    data = json.loads((tmp_path / "manifest.json").read_text())
    restart = [e for e in data["events"] if e["kind"] == "restart"]
    assert data["machine"]["cpu"] == cpu_record() and data["machine"]["cpu"]["vector_extensions"] is not None
    assert len(restart) == 1 and restart[0]["machine"] == data["machine"]
    assert "XLA_FLAGS" in data["machine"]["threads"]
