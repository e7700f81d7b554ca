"""The pair ONNX throughput benchmark's report: every ratio is a rate over its PyTorch reference."""

import pytest

from benchmarks.pair_onnx_throughput import markdown, measure, reference_label


def test_each_setting_is_compared_with_pytorch_on_one_thread_at_its_batch_size():
    assert reference_label("onnx, 2 thread(s), batch 16", [1, 2]) == "torch, 1 thread(s), batch 16"
    assert reference_label("onnx, 2 thread(s), lone pair from 512 px panels", [1, 2]) == "torch, 1 thread(s), batch 1"


def test_the_table_divides_each_rate_by_its_reference_and_states_the_load():
    rates = {
        "torch, 1 thread(s), batch 4": 10.0,
        "onnx, 2 thread(s), batch 4": 35.0,
        "torch, 1 thread(s), batch 1": 4.0,
        "onnx, 1 thread(s), lone pair from 512 px panels": 6.0,
    }
    text = markdown({"pairnet_tiny": {"input_size": 64, "pairs_per_second": rates}}, [1, 2], (3.5, 4.25))
    assert "load average 3.50 before, 4.25 after" in text.lower()
    assert "| onnx, 2 thread(s), batch 4 | 35.0 | 3.50x |" in text
    assert "| onnx, 1 thread(s), lone pair from 512 px panels | 6.0 | 1.50x |" in text
    assert "| torch, 1 thread(s), batch 1 | 4.0 | 1.00x |" in text


@pytest.mark.slow
def test_the_tiny_detector_is_timed_in_every_setting():
    found = measure("pairnet_tiny", [1], [2], pairs=4, rounds=1, panel_side=96)
    assert found["input_size"] == 64
    assert set(found["pairs_per_second"]) == {
        "torch, 1 thread(s), batch 2",
        "onnx, 1 thread(s), batch 2",
        "onnx, 1 thread(s), lone pair from 96 px panels",
    }
    assert all(rate > 0 for rate in found["pairs_per_second"].values())
