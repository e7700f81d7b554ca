"""A trained detector as a file other services run: ONNX export with the preprocessing and the
calibrated threshold inside and a parity check (`onnx_export`), preprocessing in the graph
(`graph_preprocess`), fp16 / int8 variants measured against the fp32 file (`variants`).

Named `exporting` because the top-level `export.py` entry point already owns the name `export`.
"""
