"""GPU target parsing, normalisation, resolution order, per-component checks and the env fan-out."""

from __future__ import annotations

import pytest

from imagebuild.errors import ConfigError
from imagebuild.matrix import arches
from imagebuild.matrix.arches import ArchSupport, parse_list, parse_target, resolve


@pytest.mark.parametrize(
    ("raw", "vendor", "processor", "full_id"),
    [
        ("gfx942", "amd", "gfx942", "gfx942"),
        ("GFX942", "amd", "gfx942", "gfx942"),
        ("gfx942:sramecc+:xnack-", "amd", "gfx942", "gfx942:sramecc+:xnack-"),
        ("gfx942:xnack-:sramecc+", "amd", "gfx942", "gfx942:sramecc+:xnack-"),  # LLVM order
        ("gfx90a:xnack+", "amd", "gfx90a", "gfx90a:xnack+"),
        ("gfx908", "amd", "gfx908", "gfx908"),
        ("gfx1100", "amd", "gfx1100", "gfx1100"),
        ("sm_90", "nvidia", "sm_90", "sm_90"),
        ("sm_90a", "nvidia", "sm_90a", "sm_90a"),
        ("SM_80", "nvidia", "sm_80", "sm_80"),
        ("9.0", "nvidia", "sm_90", "sm_90"),
        ("9.0a", "nvidia", "sm_90a", "sm_90a"),
        ("9.0+PTX", "nvidia", "sm_90", "sm_90+PTX"),
        ("8.6", "nvidia", "sm_86", "sm_86"),
    ],
)
def test_parse_target_normalises(raw: str, vendor: str, processor: str, full_id: str) -> None:
    target = parse_target(raw)
    assert (target.vendor, target.processor, target.id) == (vendor, processor, full_id)


@pytest.mark.parametrize(
    ("raw", "closest"),
    [
        ("gfx94", "gfx942"),
        ("gfx9422", "gfx942"),
        ("sm_91", "sm_90"),
        ("9.5", None),
        ("mi300", None),
        ("gfx1100:sramecc+", None),  # RDNA has no sramecc
        ("gfx942:xnack", None),  # a feature needs + or -
        ("gfx942:foo+", None),
    ],
)
def test_unknown_or_invalid_target_is_a_config_error(raw: str, closest: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        parse_target(raw)
    assert info.value.exit_code == 2
    assert raw in str(info.value)
    if closest:
        assert closest in str(info.value)


@pytest.mark.parametrize(
    ("spec", "ids"),
    [
        ("gfx90a;gfx942", ["gfx90a", "gfx942"]),
        ("gfx90a,gfx942", ["gfx90a", "gfx942"]),
        ("gfx90a gfx942", ["gfx90a", "gfx942"]),
        (" gfx90a ;  gfx942; ", ["gfx90a", "gfx942"]),
        ("gfx942;gfx942", ["gfx942"]),
        ("8.0;9.0", ["sm_80", "sm_90"]),
        ("8.0 9.0+PTX", ["sm_80", "sm_90+PTX"]),
        # torch's expansion (named_arches, torch/utils/cpp_extension.py): the names carry +PTX
        ("Ampere;Hopper", ["sm_80", "sm_86+PTX", "sm_90+PTX"]),
        ("Hopper+PTX", ["sm_90+PTX"]),
        ("sm_80,sm_90", ["sm_80", "sm_90"]),
    ],
)
def test_parse_list_separators(spec: str, ids: list[str]) -> None:
    assert [t.id for t in parse_list(spec)] == ids


def test_conflicting_duplicates_are_rejected() -> None:
    with pytest.raises(ConfigError, match="more than once"):
        parse_list("gfx942;gfx942:xnack-")


ROCM_COMPONENTS = [
    ArchSupport("pytorch", ("gfx90a", "gfx942"), ("gfx908",)),
    ArchSupport("kernels", ("gfx908", "gfx90a", "gfx942")),
    ArchSupport("flash-attention-ck", ("gfx90a", "gfx942"), optional=True),
]


def _rocm(**kwargs):
    return resolve(
        target="t",
        platform_kind="rocm",
        platform_arches=["gfx908", "gfx90a", "gfx942"],
        default_arches=["gfx90a", "gfx942"],
        components=ROCM_COMPONENTS,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("arch_arg", "env", "expected", "source"),
    [
        (None, {}, "gfx90a;gfx942", "matrix default"),
        (None, {"PYTORCH_ROCM_ARCH": "gfx942"}, "gfx942", "env PYTORCH_ROCM_ARCH"),
        (None, {"PYTORCH_ROCM_ARCH": "  "}, "gfx90a;gfx942", "matrix default"),
        ("gfx90a", {"PYTORCH_ROCM_ARCH": "gfx942"}, "gfx90a", "--arch"),
        (None, {"TORCH_CUDA_ARCH_LIST": "9.0"}, "gfx90a;gfx942", "matrix default"),  # other platform's knob
        ("gfx942:sramecc+:xnack-", {}, "gfx942:sramecc+:xnack-", "--arch"),
    ],
)
def test_resolution_order(arch_arg, env, expected, source) -> None:
    resolution = _rocm(arch_arg=arch_arg, env=env)
    assert resolution.arch_list == expected
    assert resolution.source == source


def test_wrong_platform_arch_is_an_error() -> None:
    with pytest.raises(ConfigError, match="sm_90 from --arch is not a ROCM arch"):
        _rocm(arch_arg="sm_90")


def test_arch_outside_platform_is_an_error_naming_the_platform_set() -> None:
    with pytest.raises(ConfigError, match="gfx1100") as info:
        _rocm(arch_arg="gfx1100")
    assert "gfx908, gfx90a, gfx942" in str(info.value)


def test_experimental_needs_the_flag_and_names_the_component() -> None:
    with pytest.raises(ConfigError) as info:
        _rocm(arch_arg="gfx908")
    message = str(info.value)
    assert "experimental for pytorch" in message and "--allow-experimental" in message


def test_experimental_with_flag_records_it_and_leaves_out_optional_component() -> None:
    resolution = _rocm(arch_arg="gfx908;gfx942", allow_experimental=True)
    assert [t.id for t in resolution.experimental] == ["gfx908"]
    plan = resolution.components["flash-attention-ck"]
    assert not plan.included
    assert "gfx908" in (plan.reason or "") and "gfx90a, gfx942" in (plan.reason or "")
    assert resolution.components["kernels"].included


def test_unsupported_non_optional_component_is_an_error_naming_its_supported_set() -> None:
    components = [ArchSupport("vllm", ("gfx90a", "gfx942"))]
    with pytest.raises(ConfigError) as info:
        resolve(
            target="t",
            platform_kind="rocm",
            platform_arches=["gfx908", "gfx942"],
            default_arches=["gfx942"],
            components=components,
            arch_arg="gfx908",
        )
    assert "vllm does not support gfx908 (supported: gfx90a, gfx942)" in str(info.value)


def test_fan_out_rocm_keeps_features_where_compilers_take_them() -> None:
    env = _rocm(arch_arg="gfx90a;gfx942:sramecc+:xnack-").env
    assert env["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx942:sramecc+:xnack-"
    assert env["GPU_TARGETS"] == env["AMDGPU_TARGETS"] == "gfx90a;gfx942:sramecc+:xnack-"
    assert env["GPU_ARCHS"] == env["AOTRITON_TARGET_ARCH"] == "gfx90a;gfx942"
    assert "TORCH_CUDA_ARCH_LIST" not in env


def test_fan_out_cuda() -> None:
    resolution = resolve(
        target="c",
        platform_kind="cuda",
        platform_arches=["sm_80", "sm_90"],
        default_arches=["sm_80", "sm_90"],
        components=[],
        arch_arg="8.0;9.0+PTX",
    )
    assert resolution.env == {"TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX", "CMAKE_CUDA_ARCHITECTURES": "80-real;90"}


def test_cpu_target_refuses_an_arch() -> None:
    with pytest.raises(ConfigError, match="CPU target"):
        resolve(
            target="local-cpu",
            platform_kind="cpu",
            platform_arches=[],
            default_arches=[],
            components=[],
            arch_arg="gfx942",
        )


def test_every_fan_out_variable_is_documented() -> None:
    for name, (vendor, formatter, why) in arches.ARCH_VARIABLES.items():
        assert vendor in ("amd", "nvidia") and why, name
        assert formatter(parse_list("gfx942" if vendor == "amd" else "9.0"))


def test_arches_cli_json_and_errors(cli) -> None:
    ok = cli("arches", "rocm6.1-torch2.3", "--arch", "gfx942", "--json")
    assert ok.exit_code == 0, ok.stderr
    import json

    data = json.loads(ok.stdout)
    assert data["arches"] == ["gfx942"]
    assert all(env.get("PYTORCH_ROCM_ARCH", "gfx942") == "gfx942" for env in data["stages"].values())
    assert data["stages"]["component-flash-attention-ck"] == {"GPU_ARCHS": "gfx942"}
    assert data["stages"]["component-vllm-rocm"] == {"PYTORCH_ROCM_ARCH": "gfx942"}
    assert data["components"]["flash-attention-ck"]["arch_vars"] == {"GPU_ARCHS": "gfx942"}
    bad = cli("arches", "rocm6.1-torch2.3", "--arch", "gfx94")
    assert bad.exit_code == 2 and bad.exception is None
    assert bad.stderr.startswith("error: unknown GPU target 'gfx94'") and "gfx942" in bad.stderr
    env_bad = cli("arches", "cuda12.1-torch2.3", env={"TORCH_CUDA_ARCH_LIST": "9.0;gfx942"})
    assert env_bad.exit_code == 2 and "env TORCH_CUDA_ARCH_LIST" in env_bad.stderr


@pytest.mark.parametrize(
    ("name", "form", "spec", "value"),
    [
        ("PYTORCH_ROCM_ARCH", "full", "gfx90a;gfx942:sramecc+:xnack-", "gfx90a;gfx942:sramecc+:xnack-"),
        ("PYTORCH_ROCM_ARCH", "bare", "gfx90a;gfx942:sramecc+:xnack-", "gfx90a;gfx942"),
        ("GPU_ARCHS", "bare", "gfx942:xnack-", "gfx942"),
        ("GPU_ARCHS", "full", "gfx942:xnack-", "gfx942:xnack-"),
        ("TORCH_CUDA_ARCH_LIST", "full", "8.0;9.0+PTX", "8.0;9.0+PTX"),
        ("TORCH_CUDA_ARCH_LIST", "bare", "8.0;9.0+PTX", "8.0;9.0"),
        ("CMAKE_CUDA_ARCHITECTURES", "bare", "8.0;9.0+PTX", "80-real;90-real"),
    ],
)
def test_format_variable_gives_each_build_its_form(name: str, form: arches.ArchForm, spec: str, value: str) -> None:
    assert arches.format_variable(name, form, parse_list(spec)) == value


def test_a_component_plan_carries_only_its_own_variables() -> None:
    support = ArchSupport("vllm", ("gfx90a", "gfx942"), arch_vars=(("PYTORCH_ROCM_ARCH", "bare"),))
    resolution = resolve(
        target="t",
        platform_kind="rocm",
        platform_arches=["gfx90a", "gfx942"],
        default_arches=["gfx942"],
        components=[support],
        arch_arg="gfx942:sramecc+:xnack-",
    )
    plan = resolution.components["vllm"]
    assert plan.env == {"PYTORCH_ROCM_ARCH": "gfx942"}
    assert plan.as_dict()["arch_vars"] == {"PYTORCH_ROCM_ARCH": "gfx942"}
