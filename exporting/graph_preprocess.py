"""Preprocessing inside the ONNX graph, so a service in any language only decodes the image.

`with_graph_preprocess(model, preprocess)` puts a small graph in front of an exported detector: its
input `image_u8` (N x H x W x 3 uint8, any H and W) is brought to the network's input by the
detector's `preprocess` (the same padding offsets and crop window as `datamodules.geometry`; for
`resize`, ONNX `Resize` with the sampling rule closest to OpenCV's, rounded to 8 bits as OpenCV's
output is) and scaled to [0, 1]. Crop and pad are exact; resizing differs from OpenCV by the
arithmetic of the two implementations (OpenCV interpolates 8-bit images in fixed point, and its
`area` and `lanczos` have no exact ONNX counterpart): `export.py` measures and reports the
difference on real files.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from datamodules.preprocess import Preprocess
from inference.model_metadata import U8_INPUT

INPUT = U8_INPUT
# OpenCV interpolation -> ONNX Resize attributes. `area` (box averaging when shrinking) is closest
# to antialiased linear; `lanczos` has no ONNX mode and falls back to cubic (a = -0.75, as OpenCV).
RESIZE_MODES = {
    "nearest": {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    "bilinear": {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
    "bicubic": {"mode": "cubic", "coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.75},
    "area": {"mode": "linear", "coordinate_transformation_mode": "half_pixel", "antialias": 1},
    "lanczos": {"mode": "cubic", "coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.75},
}


def _const(name: str, values, dtype=np.int64) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(values, dtype=dtype), name)
    )


def _resize_nodes(source: str, sizes: str, target: str, interpolation: str) -> list[onnx.NodeProto]:
    """Resize `source` to `sizes` (N, C, h, w), rounded and clipped to 8-bit levels as OpenCV's output."""
    return [
        helper.make_node("Resize", [source, "", "", sizes], ["pp_resized"], **RESIZE_MODES[interpolation]),
        helper.make_node("Round", ["pp_resized"], ["pp_rounded"]),
        _const("pp_lo", 0.0, np.float32),
        _const("pp_hi", 255.0, np.float32),
        helper.make_node("Clip", ["pp_rounded", "pp_lo", "pp_hi"], [target]),
    ]


def _short_side_nodes(source: str, target: str, short: int, interpolation: str) -> list[onnx.NodeProto]:
    """`datamodules.geometry.resize_short_side`: short side to `short`, long side floor(short * long / short_side)."""
    return [
        helper.make_node("Shape", [source], ["rs_shape"]),
        _const("rs_nc_idx", [0, 1]),
        helper.make_node("Gather", ["rs_shape", "rs_nc_idx"], ["rs_nc"]),
        _const("rs_h_idx", [2]),
        _const("rs_w_idx", [3]),
        _const("rs_short", [short]),
        helper.make_node("Gather", ["rs_shape", "rs_h_idx"], ["rs_h"]),
        helper.make_node("Gather", ["rs_shape", "rs_w_idx"], ["rs_w"]),
        helper.make_node("Mul", ["rs_short", "rs_w"], ["rs_short_w"]),
        helper.make_node("Div", ["rs_short_w", "rs_h"], ["rs_long_w"]),
        helper.make_node("Mul", ["rs_short", "rs_h"], ["rs_short_h"]),
        helper.make_node("Div", ["rs_short_h", "rs_w"], ["rs_long_h"]),
        helper.make_node("LessOrEqual", ["rs_h", "rs_w"], ["rs_landscape"]),
        helper.make_node("Where", ["rs_landscape", "rs_short", "rs_long_h"], ["rs_new_h"]),
        helper.make_node("Where", ["rs_landscape", "rs_long_w", "rs_short"], ["rs_new_w"]),
        helper.make_node("Concat", ["rs_nc", "rs_new_h", "rs_new_w"], ["rs_sizes"], axis=0),
        *_resize_nodes(source, "rs_sizes", target, interpolation),
    ]


def _crop_nodes(source: str, target: str, size: int, mode: str) -> list[onnx.NodeProto]:
    """Pad with zeros (centred, or bottom/right for `pad`) or repeat the image (`tile`) up to
    `size`, then take the centre (top-left for `pad`) `size` x `size` window.

    Kept in one piece: one ONNX subgraph built node by node; split, its node order would be hard to follow.
    """
    centre = mode != "pad"
    nodes = [
        helper.make_node("Shape", [source], ["pp_shape"]),
        _const("pp_hw_idx", [2, 3]),
        helper.make_node("Gather", ["pp_shape", "pp_hw_idx"], ["pp_hw"]),  # [H, W]
        _const("pp_size2", [size, size]),
    ]
    nodes += [_const("pp_two", [2, 2])] if centre else []
    nodes += [_const("pp_zero2", [0, 0])] if mode != "tile" else []
    if mode == "tile":  # whole copies from the top-left: ceil(size / side) along each short side
        nodes += [
            _const("pp_one2", [1, 1]),
            helper.make_node("Add", ["pp_size2", "pp_hw"], ["pp_sum"]),
            helper.make_node("Sub", ["pp_sum", "pp_one2"], ["pp_sum1"]),
            helper.make_node("Div", ["pp_sum1", "pp_hw"], ["pp_copies"]),
            helper.make_node("Max", ["pp_copies", "pp_one2"], ["pp_reps_hw"]),
            helper.make_node("Concat", ["pp_one2", "pp_reps_hw"], ["pp_reps"], axis=0),
            helper.make_node("Tile", [source, "pp_reps"], ["pp_padded"]),
            helper.make_node("Mul", ["pp_hw", "pp_reps_hw"], ["pp_padded_hw"]),
        ]
    else:
        nodes += [
            helper.make_node("Sub", ["pp_size2", "pp_hw"], ["pp_short"]),
            helper.make_node("Max", ["pp_short", "pp_zero2"], ["pp_pad"]),
        ]  # missing rows, cols
        if centre:
            nodes += [
                helper.make_node("Div", ["pp_pad", "pp_two"], ["pp_before"]),  # floor: pad >= 0
                helper.make_node("Sub", ["pp_pad", "pp_before"], ["pp_after"]),
            ]
        else:
            nodes += [
                helper.make_node("Identity", ["pp_zero2"], ["pp_before"]),
                helper.make_node("Identity", ["pp_pad"], ["pp_after"]),
            ]
        nodes += [
            helper.make_node("Concat", ["pp_zero2", "pp_before", "pp_zero2", "pp_after"], ["pp_pads"], axis=0),
            helper.make_node("Pad", [source, "pp_pads"], ["pp_padded"], mode="constant"),
            helper.make_node("Add", ["pp_hw", "pp_pad"], ["pp_padded_hw"]),
        ]
    if centre:
        # round(spare / 2), halves to even (torchvision's CenterCrop): spare // 2, plus 1 when
        # spare is odd and spare // 2 is odd
        nodes += [
            helper.make_node("Sub", ["pp_padded_hw", "pp_size2"], ["pp_spare"]),
            helper.make_node("Div", ["pp_spare", "pp_two"], ["pp_half"]),
            helper.make_node("Mod", ["pp_spare", "pp_two"], ["pp_spare_odd"]),
            helper.make_node("Mod", ["pp_half", "pp_two"], ["pp_half_odd"]),
            helper.make_node("Mul", ["pp_spare_odd", "pp_half_odd"], ["pp_round_up"]),
            helper.make_node("Add", ["pp_half", "pp_round_up"], ["pp_start"]),
        ]
    else:
        nodes += [helper.make_node("Identity", ["pp_zero2"], ["pp_start"])]
    return nodes + [
        helper.make_node("Add", ["pp_start", "pp_size2"], ["pp_end"]),
        _const("pp_axes", [2, 3]),
        helper.make_node("Slice", ["pp_padded", "pp_start", "pp_end", "pp_axes"], [target]),
    ]


def _geometry_nodes(preprocess: Preprocess, source: str, target: str) -> list[onnx.NodeProto]:
    """Nodes from `source` (N x 3 x H x W float, 0-255) to `target` (N x 3 x size x size)."""
    size, mode = preprocess.size, preprocess.mode
    if mode == "none":
        return [helper.make_node("Identity", [source], [target])]
    if mode == "resize":
        return [
            _const("pp_nc_idx", [0, 1]),
            helper.make_node("Shape", [source], ["pp_in_shape"]),
            helper.make_node("Gather", ["pp_in_shape", "pp_nc_idx"], ["pp_nc"]),
            _const("pp_hw_out", [size, size]),
            helper.make_node("Concat", ["pp_nc", "pp_hw_out"], ["pp_sizes"], axis=0),
            *_resize_nodes(source, "pp_sizes", target, preprocess.interpolation),
        ]
    if mode == "resize_crop":
        short = int(preprocess.load_size or size)
        return [
            *_short_side_nodes(source, "pp_short_resized", short, preprocess.interpolation),
            *_crop_nodes("pp_short_resized", target, size, "center_crop"),
        ]
    return _crop_nodes(source, target, size, mode)


def preprocess_graph(
    preprocess: Preprocess, output: str = "image", opset: int = 18, ir_version: int | None = None
) -> onnx.ModelProto:
    """`image_u8` (N x H x W x 3 uint8) -> `output` (N x 3 x size x size float32 in [0, 1])."""
    preprocess = Preprocess.from_config(preprocess)
    nodes = [
        helper.make_node("Cast", [INPUT], ["pp_float_nhwc"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["pp_float_nhwc"], ["pp_float"], perm=[0, 3, 1, 2]),
        *_geometry_nodes(preprocess, "pp_float", "pp_geometry"),
        _const("pp_255", 255.0, np.float32),
        helper.make_node("Div", ["pp_geometry", "pp_255"], [output]),
    ]
    side = preprocess.size if preprocess.mode != "none" else "width"
    graph = helper.make_graph(
        nodes,
        "preprocess",
        [helper.make_tensor_value_info(INPUT, TensorProto.UINT8, ["batch", "height", "width", 3])],
        [
            helper.make_tensor_value_info(
                output, TensorProto.FLOAT, ["batch", 3, side if preprocess.mode != "none" else "height", side]
            )
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version if ir_version is not None else 8  # 8: read by every onnxruntime >= 1.14
    onnx.checker.check_model(model)
    return model


def with_graph_preprocess(model: onnx.ModelProto, preprocess: Preprocess) -> onnx.ModelProto:
    """`model` (input `image`) with the preprocessing graph in front (input `image_u8`); metadata kept."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    front = preprocess_graph(preprocess, output="pp_image", opset=opset, ir_version=model.ir_version)
    for extra in model.opset_import:  # merge_models wants the same opset imports on both sides
        if extra.domain not in ("", "ai.onnx"):
            front.opset_import.append(extra)
    merged = onnx.compose.merge_models(front, model, io_map=[("pp_image", "image")])
    versions: dict[str, int] = {}  # merge_models lists each side's imports: one per domain is kept
    for found in merged.opset_import:
        versions[found.domain] = max(versions.get(found.domain, 0), found.version)
    del merged.opset_import[:]
    for domain, version in versions.items():
        merged.opset_import.add(domain=domain, version=version)
    del merged.metadata_props[:]
    for prop in model.metadata_props:
        merged.metadata_props.add(key=prop.key, value=prop.value)
    merged.metadata_props.add(key="input", value=INPUT)
    onnx.checker.check_model(merged)
    return merged
