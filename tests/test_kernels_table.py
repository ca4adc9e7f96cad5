"""skinny_linear's dispatch table and rule without a GPU: the shapes file, the variant list against the CUDA source,
the rule (measured shapes only: no extrapolation), the packaged table, and `imagebuild kernels explain`."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagebuild.cli import main

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ibk_table", ROOT / "kernels" / "imagebuild_kernels" / "_table.py")
assert _spec and _spec.loader
T = importlib.util.module_from_spec(_spec)
sys.modules["ibk_table"] = T
_spec.loader.exec_module(T)


def derive(c: dict[str, int], mlp: str = "gated") -> dict[str, list[int]]:
    h, hd = c["hidden_size"], c["head_dim"]
    nh, kv = c["num_attention_heads"], c["num_key_value_heads"]
    up = {"gate_up": [2 * c["intermediate_size"], h]} if mlp == "gated" else {"up": [c["intermediate_size"], h]}
    return {
        "qkv": [(nh + 2 * kv) * hd, h],
        "o": [h, nh * hd],
        **up,
        "down": [h, c["intermediate_size"]],
        "lm_head": [c["vocab_size"], h],
    }


READ_AT = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}:[\w./-]+#L\d+-L\d+ \([\w.-]+\)")


def test_shapes_file_derives_from_the_model_configs() -> None:
    doc = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())
    families = {m["family"] for m in doc["models"]}
    assert len(families) >= 6, families
    distinct = set()
    for m in doc["models"]:
        assert m["hf_config"].startswith("huggingface.co/") and m["hf_config"].endswith(" config.json")
        assert READ_AT.fullmatch(m["read_at"]), m["read_at"]
        assert m["shapes"] == derive(m["config"]), m["name"]
        distinct |= {tuple(v) for v in m["shapes"].values()}
    assert len(distinct) >= 30
    assert {1, 2, 4, 8, 16} <= set(doc["ms"]) and any(x % 2 for x in doc["ms"] if x > 1)


def test_unseen_families_are_apart_and_derive_from_their_configs() -> None:
    """At least 3 model families the table was not built on, each with its config's source (issue 24)."""
    doc = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())
    seen_families = {m["family"] for m in doc["models"]}
    unseen = doc["unseen_models"]
    assert len({m["family"] for m in unseen} - seen_families) >= 3
    measured = {tuple(v) for m in doc["models"] for v in m["shapes"].values()}
    new_shapes = set()
    for m in unseen:
        assert m["family"] not in seen_families, m["name"]
        assert m["hf_config"].startswith("huggingface.co/") and m["hf_config"].endswith(" config.json")
        assert READ_AT.fullmatch(m["read_at"]), m["read_at"]
        assert m["shapes"] == derive(m["config"], m.get("mlp", "gated")), m["name"]
        new_shapes |= {tuple(v) for v in m["shapes"].values()} - measured
    assert len(new_shapes) >= 10


def test_variants_match_the_cuda_source() -> None:
    src = (ROOT / "kernels" / "csrc" / "skinny_linear.cuh").read_text()
    assert T.variants_in_source(src) == T.VARIANTS
    assert f"kSkinnyVariants = {max(T.VARIANTS)};" in src


def table(entries: list[tuple[str, int, int, int, int]]) -> dict[str, object]:
    rows = [{"dtype": d, "N": n, "K": k, "M": m, "cfg": c} for d, n, k, m, c in entries]
    return {"cc": 90, "sm_count": 132, "entries": rows}


def test_rule_measured_shapes_only_and_m_between_ours() -> None:
    t = table(
        [
            ("bfloat16", 4096, 4096, 1, 14),
            ("bfloat16", 4096, 4096, 4, 212),
            ("bfloat16", 4096, 4096, 8, 212),
            ("bfloat16", 4096, 4096, 13, 3),
            ("bfloat16", 4096, 4096, 16, -1),
            ("bfloat16", 8192, 4096, 1, 12),
            ("float16", 4096, 4096, 1, 3),
            ("float16", 4096, 4096, 4, -1),
        ]
    )
    assert T.choose(t, "bfloat16", 4096, 4096, 1).cfg == 14
    assert T.choose(t, "bfloat16", 4096, 4096, 16).cfg == -1  # measured: F.linear won there
    assert T.choose(t, "bfloat16", 4096, 4096, 6).cfg == 212  # between M 4 and 8, both ours: M 8's cfg
    assert T.choose(t, "bfloat16", 4096, 4096, 3).cfg == 212  # between M 1 and 4, both ours: M 4's cfg
    assert T.choose(t, "bfloat16", 4096, 4096, 14).cfg == -1  # between M 13 (ours) and 16 (F.linear)
    assert T.choose(t, "bfloat16", 4096, 4096, 9).cfg == -1  # below the half's smallest measured M
    assert T.choose(t, "float16", 4096, 4096, 2).cfg == -1  # between ours and F.linear
    assert T.choose(t, "float16", 4096, 4096, 8).cfg == -1  # above the half's largest measured M
    # off the measured region: F.linear, however close (the old rule took 4500 x 4096 from 4096 x 4096)
    for n, k in ((4500, 4096), (4096, 4104), (7000, 4096), (4544, 4544)):
        ch = T.choose(t, "bfloat16", n, k, 1)
        assert ch.cfg == -1 and "not measured" in ch.reason
    assert T.choose(t, "bfloat16", 4096, 4096, 1, cc=80).cfg == -1  # another GPU: library
    assert T.choose(t, "bfloat16", 4096, 4100, 1).cfg == -1  # K % 8
    assert T.choose(t, "bfloat16", 4096, 4096, 17).cfg == -1
    assert T.choose(None, "bfloat16", 4096, 4096, 1).cfg == -1


def test_packaged_table_picks_f_linear_on_every_unseen_shape() -> None:
    doc = T.load_table(T.TABLE_PATH)
    yml = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())
    measured = {(e["N"], e["K"]) for e in doc["entries"]}
    for m in yml["unseen_models"]:
        for n, k in m["shapes"].values():
            for dtype in ("float16", "bfloat16"):
                for mm in range(1, 17):
                    ch = T.choose(doc, dtype, n, k, mm)
                    if (n, k) not in measured:
                        assert ch.cfg == -1, (m["name"], n, k, mm)


def test_bad_table_entries_are_refused(tmp_path: Path) -> None:
    for bad in (("bfloat16", 64, 64, 1, 24), ("bfloat16", 64, 64, 1, 306), ("bfloat16", 64, 64, 17, 1)):
        f = tmp_path / "t.json"
        f.write_text(json.dumps(table([bad])))
        with pytest.raises(T.TableError):
            T.load_table(f)


def test_packaged_table_covers_the_shapes_and_never_picks_a_loser() -> None:
    doc = T.load_table(T.TABLE_PATH)
    assert doc is not None and doc["cc"] == 90 and doc["sm_count"] == 132
    yml = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())
    shapes = {tuple(v) for m in yml["models"] for v in m["shapes"].values()}
    seen = {(e["N"], e["K"]) for e in doc["entries"]}
    assert shapes == seen
    for e in doc["entries"]:
        speedup = e["cublas_us"] / e["ours_us"]
        assert math.isclose(speedup, e["speedup"], rel_tol=1e-9)
        assert (e["cfg"] != -1) == (speedup >= doc["margin"]), e
        assert T.choose(doc, e["dtype"], e["N"], e["K"], e["M"]).cfg == e["cfg"]


def test_explain_cli() -> None:
    res = CliRunner().invoke(main, ["kernels", "explain", "1536", "1536", "3", "bf16"])
    assert res.exit_code == 0, res.output
    assert "cfg " in res.output and "cuBLAS" in res.output and "measured" in res.output
    res = CliRunner().invoke(main, ["kernels", "explain", "4096", "4100", "1", "fp16"])
    assert res.exit_code == 0 and "F.linear" in res.output and "multiple of 8" in res.output
    res = CliRunner().invoke(main, ["kernels", "explain", "0", "4096", "1", "fp16"])
    assert res.exit_code == 2
