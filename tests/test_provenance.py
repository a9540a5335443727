"""The run directory's environment record (`dreamgym_pl/provenance.py`) and compare_runs' notes on it."""

import json
from importlib import metadata

from dreamgym_pl import provenance as pv


def test_cpu_model_reads_the_model_name():
    text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nflags\t: fpu\n"
    assert pv.cpu_model(text) == "Intel(R) Xeon(R) CPU @ 2.20GHz"

def test_cpu_model_falls_back_to_the_platform(monkeypatch):
    monkeypatch.setattr(pv.platform, "processor", lambda: "x86_64")
    assert pv.cpu_model("processor\t: 0\nmodel name\t:   \n") == "x86_64"  # an empty name
    monkeypatch.setattr(pv.platform, "processor", lambda: "")
    assert pv.cpu_model("") == "unknown"


def test_cpu_flags_reads_the_isa_flags_in_order():
    text = "processor\t: 0\nflags\t\t: fpu sse2 amx_bf16 avx2 avx512f fma\nprocessor\t: 1\nflags\t: fpu\n"
    assert pv.cpu_flags(text) == ["avx2", "fma", "avx512f", "amx_bf16"]  # ISA_FLAGS' order, the first CPU's line
    assert pv.cpu_flags("processor\t: 0\n") == [] and pv.cpu_flags("") == []
    assert pv.cpu_flags("Features\t: fp asimd\n", ("asimd", "sve")) == ["asimd"]  # arm's name for the line


def test_package_versions_are_the_installed_ones():
    v = pv.package_versions(("torch", "no-such-package-xyz"))
    assert v == {"torch": metadata.version("torch"), "no-such-package-xyz": None}


def test_environment_record_fields(tmp_path):
    r = pv.environment_record(stages=["collect", "sft"], resume=True)
    for key in ("time", "commit", "python", "platform", "cpu", "cpu_count", "cpu_flags", "cpu_capability",
                "torch_threads", "packages"):
        assert key in r
    assert r["stages"] == ["collect", "sft"] and r["resume"] is True
    assert "stages" not in pv.flatten(r) and "resume" not in pv.flatten(r)  # they differ between invocations
    assert r["packages"]["transformers"] == metadata.version("transformers") and r["torch_threads"] >= 1
    pv.append_record(tmp_path, r)
    pv.append_record(tmp_path, {**r, "time": "later"})
    with open(tmp_path / pv.FILE, "a") as f:
        f.write('{"torn": ')  # a kill mid-write: skipped on read
    recs = pv.read_records(tmp_path)
    assert [x["time"] for x in recs] == [r["time"], "later"]
    assert pv.read_records(tmp_path / "nowhere") == []


def test_summarise_and_differences_hand_values():
    a1 = {"time": "t1", "pid": 1, "argv": ["x"], "cpu": "A", "torch_threads": 2, "packages": {"torch": "2.13", "numpy": "2.4"}}
    a2 = {**a1, "time": "t2", "pid": 2, "torch_threads": 1}  # the run resumed with one thread
    b = {**a1, "time": "t3", "pid": 3, "packages": {"torch": "2.13", "numpy": "2.5"}}
    sa, sb = pv.summarise([a1, a2]), pv.summarise([b])
    assert sa == {"cpu": "A", "torch_threads": [2, 1], "packages.torch": "2.13", "packages.numpy": "2.4"}
    assert pv.differences({"a": sa, "b": sb}) == {"packages.numpy": {"a": "2.4", "b": "2.5"},
                                                  "torch_threads": {"a": [2, 1], "b": 2}}
    assert pv.differences({"a": sb, "b": pv.summarise([b, b])}) == {}  # volatile fields (time, pid) never differ


def test_compare_runs_notes_environment_differences(tmp_path):
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "experiments" / "compare_runs.py"
    notes = runpy.run_path(str(script))["environment_notes"]
    rec = {"cpu": "A", "torch_threads": 2, "packages": {"transformers": "5.24.0"}}
    for name, tf in (("r1", "5.24.0"), ("r2", "5.23.0")):
        (tmp_path / name).mkdir()
        (tmp_path / name / pv.FILE).write_text(json.dumps({**rec, "packages": {"transformers": tf}}) + "\n")
    (tmp_path / "old").mkdir()
    lines = notes([tmp_path / "r1", tmp_path / "r2", tmp_path / "old"])
    assert lines[0] == f"note: no environment.jsonl (made before it existed): {tmp_path / 'old'}"
    assert lines[1] == f"note: runs differ in packages.transformers: {tmp_path / 'r1'}=5.24.0; {tmp_path / 'r2'}=5.23.0"
    assert len(lines) == 2
    assert notes([tmp_path / "r1", tmp_path / "r1"]) == []
