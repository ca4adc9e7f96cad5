"""skinny_linear's dispatch table and rule without a GPU: the shapes file, the variant list against the CUDA source,
the nearest-shape rule, the packaged table, and `imagebuild kernels explain`."""

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


def derive(c: dict[str, int]) -> dict[str, list[int]]:
    h, hd = c["hidden_size"], c["head_dim"]
    nh, kv = c["num_attention_heads"], c["num_key_value_heads"]
    return {
        "qkv": [(nh + 2 * kv) * hd, h],
        "o": [h, nh * hd],
        "gate_up": [2 * c["intermediate_size"], h],
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


def test_variants_match_the_cuda_source() -> None:
    src = (ROOT / "kernels" / "csrc" / "skinny_linear.cuh").read_text()
    assert T.variants_in_source(src) == T.VARIANTS
    assert f"kSkinnyVariants = {max(T.VARIANTS)};" in src


def table(entries: list[tuple[str, int, int, int, int]]) -> dict[str, object]:
    rows = [{"dtype": d, "N": n, "K": k, "M": m, "cfg": c} for d, n, k, m, c in entries]
    return {"cc": 90, "sm_count": 132, "entries": rows}


def test_rule_exact_nearest_far_and_m_halves() -> None:
    t = table(
        [
            ("bfloat16", 4096, 4096, 1, 14),
            ("bfloat16", 4096, 4096, 8, 212),
            ("bfloat16", 4096, 4096, 16, -1),
            ("bfloat16", 8192, 4096, 1, 12),
            ("float16", 4096, 4096, 1, 3),
        ]
    )
    assert T.choose(t, "bfloat16", 4096, 4096, 1).cfg == 14
    assert T.choose(t, "bfloat16", 4096, 4096, 3).cfg == 212  # smallest measured M >= 3 in the half <= 8
    assert T.choose(t, "bfloat16", 4096, 4096, 12).cfg == -1  # the half > 8 has only M 16
    assert T.choose(t, "bfloat16", 4500, 4096, 1).cfg == 14  # nearest in log2 distance
    assert T.choose(t, "bfloat16", 7000, 4096, 1).cfg == 12
    assert T.choose(t, "bfloat16", 4096, 4096 * 2, 1).cfg == -1  # farther than 2**0.5
    assert T.choose(t, "float16", 4096, 4096, 8).cfg == 3  # no M >= 8 measured: the largest below
    assert T.choose(t, "float16", 4096, 4096, 9).cfg == -1  # nothing in the half > 8
    assert T.choose(t, "bfloat16", 4096, 4096, 1, cc=80).cfg == -1  # another GPU: library
    assert T.choose(t, "bfloat16", 4096, 4100, 1).cfg == -1  # K % 8
    assert T.choose(t, "bfloat16", 4096, 4096, 17).cfg == -1
    assert T.choose(None, "bfloat16", 4096, 4096, 1).cfg == -1


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
