"""Scoring with a trained detector: runtimes (.ckpt / .onnx), tiling, the scoring loop, result files and masks."""
