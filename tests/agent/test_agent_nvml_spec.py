import pytest

from node_agent.nvml.spec import GPUSpecError, parse_gpu_spec


def test_single_model() -> None:
    (item,) = parse_gpu_spec("8xH100-80GB")
    assert (item.count, item.model, item.memory_mib) == (8, "H100", 80 * 1024)
    assert item.name == "NVIDIA H100-80GB"


def test_mixed_models_keep_order_and_default_count() -> None:
    items = parse_gpu_spec("2xA100-40GB, T4-16GB ,1xL4-24576MiB")
    assert [(i.count, i.model, i.memory_mib) for i in items] == [
        (2, "A100", 40960),
        (1, "T4", 16384),
        (1, "L4", 24576),
    ]


def test_model_with_dashes() -> None:
    (item,) = parse_gpu_spec("4xA100-SXM4-80GB")
    assert (item.model, item.memory_mib) == ("A100-SXM4", 81920)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("", "empty GPU spec"),
        ("8xH100", "'8xH100'"),
        ("8xH100-80GB,,", "''"),
        ("0xT4-16GB", "count must be at least 1"),
        ("2xT4-0GB", "memory must be"),
        ("65xT4-16GB", "at most 64"),
        ("8*H100-80GB", "expected [COUNTx]MODEL-MEMGB"),
    ],
)
def test_bad_specs_give_one_clear_line(spec: str, fragment: str) -> None:
    with pytest.raises(GPUSpecError) as info:
        parse_gpu_spec(spec)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)
