"""Fakes made by real diffusion models: any local `diffusers` pipeline, offline, batched, on GPU in fp16.

The generators trained here are small; users who hold real weights (Stable Diffusion 1.x/2.x/XL,
turbo variants, or anything `diffusers`' AutoPipeline loads) make the fakes detectors actually meet:
whole-image img2img at each configured strength (SDEdit, as people re-render evidence) and masked
inpainting (a region regenerated; the result is composited with the exact mask, so pixels outside
it equal the genuine panel). Nothing is downloaded: the pipeline is read from a local folder
(`model_index.json` and one subfolder per component) with `local_files_only=True`, and a missing
folder, file or package is one clear error naming it. Every item records the model, pipeline class,
strength, steps, guidance, prompt, seed, extra arguments, dtype and device. `synthesis.diffusers_set`
makes a generated set of them, resumably.

`diffusers` (and `transformers` for the text encoders) are an optional extra:
`pip install -e ".[generate]"`.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np

from synthesis.common import as_rgb_uint8, composite, inner_alpha, random_ellipse
from synthesis.diffusers_folder import DiffusersUnavailable, check_folder, load_error, model_content

log = logging.getLogger(__name__)

__all__ = [
    "DiffusersOptions",
    "DiffusersUnavailable",
    "load_pipelines",
    "generate_fakes",
    "DiffusersFake",
    "diffusers_group",
    "plan_names",
]

INSTALL_HINT = 'pip install -e ".[generate]"  (or: pip install diffusers transformers)'


@dataclass(frozen=True)
class DiffusersOptions:
    """Which local pipeline and how it is sampled."""

    model: str | None = None  # a local folder saved by `save_pretrained` (model_index.json inside)
    prompt: str = "a photograph"
    negative_prompt: str | None = None
    strengths: Sequence[float] = (0.3, 0.6)  # img2img strengths; each is its own group
    inpaint_strength: float = 1.0
    img2img: float = 1.0  # expected img2img fakes per genuine panel (strengths take turns)
    inpaint: float = 0.5  # expected inpainting fakes per genuine panel
    steps: int = 30
    guidance_scale: float = 5.0
    batch_size: int = 4
    device: str = "auto"  # auto: cuda when available, else cpu
    dtype: str = "auto"  # auto: float16 on cuda, float32 on cpu; or float16 | bfloat16 | float32
    region_fraction: Sequence[float] = (0.05, 0.2)  # inpainting region size, fraction of the panel
    seed: int = 0
    extra: dict = field(default_factory=dict)  # more keyword arguments for every pipeline call

    def __post_init__(self) -> None:
        check_extra(self.extra)
        # img2img pipelines run int(steps x strength) steps: zero would denoise nothing (and crash)
        weak = [s for s in (*self.strengths, self.inpaint_strength) if not 0 < s <= 1 or int(self.steps * s) < 1]
        if weak:
            raise ValueError(
                f"every strength must be in (0, 1] with steps x strength >= 1; got strengths "
                f"{weak} with steps={self.steps}"
            )

    def stamp(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """What a set made with these options by the pipelines `info` describes (`load_pipelines`) is
        stamped with (`DatasetSpec.backend`): the model, by its folder's name (the fakes record it)
        and content, and every option that changes the fakes. That includes the dtype and device the
        run resolved (`auto` is float16 on CUDA, float32 on a CPU): the precision changes the pixels,
        and each fake's random generator is made on the device, whose kind (CPU or CUDA) draws
        another noise from the same seed. Not the batch size: every fake has its own generator, so
        batching leaves its noise as it is."""
        options = json.loads(json.dumps(asdict(self), default=list))
        del options["batch_size"]
        folder = Path(info["model_path"])
        return {
            "name": "diffusers",
            **options,
            "dtype": info["dtype"],
            "device": str(info["device"]).partition(":")[0],  # cuda:0 and cuda:1 draw the same noise
            "model": {"name": folder.name, "content": model_content(folder)},
        }


# pipeline arguments the toolkit sets itself, and the option that sets each: `extra` passing one
# would change the fakes while their group and records still said the option's value
RESERVED_EXTRA = {
    "strength": "generator.strengths (img2img) or generator.inpaint_strength",
    "num_inference_steps": "generator.steps",
    "guidance_scale": "generator.guidance_scale",
    "prompt": "generator.prompt",
    "prompt_embeds": "generator.prompt",
    "negative_prompt": "generator.negative_prompt",
    "negative_prompt_embeds": "generator.negative_prompt",
    "generator": "generator.seed",
    "image": None,
    "mask_image": None,
    "height": None,
    "width": None,
    "output_type": None,
    "return_dict": None,
    "num_images_per_prompt": None,
}


def check_extra(extra: Any) -> None:
    """`generator.extra` is a mapping of pipeline arguments the toolkit does not set itself (one it
    sets would be overridden without the fakes' group or records knowing)."""
    if not isinstance(extra, Mapping):
        raise ValueError(f"generator.extra must be a mapping of pipeline arguments, got {extra!r}")
    if taken := [key for key in extra if key in RESERVED_EXTRA]:
        reasons = [
            f"generator.extra.{key} is set by the toolkit: use {RESERVED_EXTRA[key]} instead"
            if RESERVED_EXTRA[key]
            else f"generator.extra.{key} is set by the toolkit itself"
            for key in taken
        ]
        raise ValueError("; ".join(reasons))


@dataclass
class DiffusersFake:
    key: str  # the genuine panel it was made from
    operation: str  # img2img | inpaint
    group: str
    image: np.ndarray
    mask: np.ndarray
    meta: dict[str, Any]
    name: str = ""  # <key>_<group>_<n>: its files' name in a generated set


def diffusers_group(operation: str, strength: float) -> str:
    return f"diffusers_img2img_{strength:g}" if operation == "img2img" else "diffusers_inpaint"


def _imports():
    try:
        import diffusers
        import torch
    except ImportError as error:
        raise DiffusersUnavailable(
            f"generator=diffusers needs the `diffusers` package ({error.name} is not installed): {INSTALL_HINT}"
        ) from error
    return diffusers, torch


def _device_dtype(options: DiffusersOptions, torch) -> tuple[str, Any]:
    device = options.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DiffusersUnavailable(f"generator.device={device} but no CUDA device is available")
    name = options.dtype if options.dtype != "auto" else ("float16" if device.startswith("cuda") else "float32")
    if name not in ("float16", "bfloat16", "float32"):
        raise ValueError(f"generator.dtype must be auto, float16, bfloat16 or float32, got {name!r}")
    return device, getattr(torch, name)


def load_pipelines(options: DiffusersOptions) -> tuple[Any, Any, dict[str, Any]]:
    """(img2img pipeline, inpainting pipeline sharing its components, description) from the local
    folder. The inpainting pipeline is built only when inpainting fakes are asked for
    (`generator.inpaint` > 0), so a pipeline with an img2img variant only serves img2img fakes."""
    diffusers, torch = _imports()
    folder = check_folder(options.model)
    device, dtype = _device_dtype(options, torch)
    try:
        img2img = diffusers.AutoPipelineForImage2Image.from_pretrained(folder, torch_dtype=dtype, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - all from the folder's files: no toolkit code runs in there
        # (OSError, ValueError, RuntimeError for weights that do not fit their config, UnpicklingError...)
        raise load_error(folder, error) from error
    inpaint = None
    if options.inpaint > 0:
        try:
            inpaint = diffusers.AutoPipelineForInpainting.from_pipe(img2img)
        except ValueError as error:  # AutoPipeline knows no inpainting pipeline of this kind
            raise DiffusersUnavailable(
                f"{folder} holds a {type(img2img).__name__}, which has no inpainting variant: "
                "set generator.inpaint=0 to make img2img fakes only"
            ) from error
    for pipe in (img2img, inpaint):
        if pipe is not None:
            pipe.to(device)
            pipe.set_progress_bar_config(disable=True)
    info = {
        "model": folder.name,
        "model_path": str(folder.resolve()),
        "img2img_pipeline": type(img2img).__name__,
        "inpaint_pipeline": type(inpaint).__name__ if inpaint is not None else None,
        "dtype": str(dtype).removeprefix("torch."),
        "device": device,
    }
    log.info(
        "diffusers: %s (%s / %s) on %s in %s",
        info["model"],
        info["img2img_pipeline"],
        info["inpaint_pipeline"] or "no inpainting",
        device,
        info["dtype"],
    )
    return img2img, inpaint, info


def _multiple(pipe) -> int:
    """Pixel multiple a pipeline's sizes must honour: VAE factor x the U-Net's down-sampling."""
    vae = getattr(pipe, "vae_scale_factor", 8)
    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    blocks = len(getattr(getattr(denoiser, "config", None), "block_out_channels", None) or [1, 1, 1, 1])
    return int(vae) * 2 ** (blocks - 1)


def _pad(image: np.ndarray, multiple: int) -> np.ndarray:
    h, w = image.shape[:2]
    return np.pad(image, ((0, (-h) % multiple), (0, (-w) % multiple), (0, 0)), mode="reflect")


def _plan(panels: Sequence[tuple[str, np.ndarray]], options: DiffusersOptions) -> list[dict[str, Any]]:
    """One job per fake: panel, operation, strength and seed, drawn per panel from (seed, key), and
    its name (`<key>_<group>_<n>`), the same whichever fakes an earlier run made."""
    jobs, counts = [], Counter()
    for key, image in panels:
        rng = np.random.default_rng([options.seed, zlib.crc32(key.encode())])
        for operation, rate in (("img2img", options.img2img), ("inpaint", options.inpaint)):
            count = int(np.floor(rate)) + int(rng.random() < rate - np.floor(rate))
            for j in range(count):
                strength = (
                    float(options.strengths[(int(rng.integers(len(options.strengths))) + j) % len(options.strengths)])
                    if operation == "img2img"
                    else float(options.inpaint_strength)
                )
                mask = (
                    random_ellipse(image.shape[:2], rng, float(rng.uniform(*options.region_fraction)))
                    if operation == "inpaint"
                    else np.ones(image.shape[:2], bool)
                )
                group = diffusers_group(operation, strength)
                jobs.append(
                    {
                        "name": f"{key}_{group}_{counts[(key, group)]}",
                        "key": key,
                        "image": as_rgb_uint8(image),
                        "operation": operation,
                        "strength": strength,
                        "mask": mask,
                        "seed": int(rng.integers(2**31 - 1)),
                        "index": j,
                    }
                )
                counts[(key, group)] += 1
    return jobs


def generate_fakes(
    panels: Sequence[tuple[str, np.ndarray]],
    options: DiffusersOptions,
    pipelines: tuple[Any, Any, dict[str, Any]] | None = None,
    skip: Collection[str] = (),
) -> Iterable[DiffusersFake]:
    """Img2img and inpainting fakes of `panels` ((key, uint8 image) pairs), batched by operation,
    strength and size, but for those named in `skip` (made by an earlier run). Deterministic per
    (options.seed, key) on a given device and dtype."""
    from PIL import Image

    _, torch = _imports()
    img2img, inpaint, info = pipelines or load_pipelines(options)
    jobs = [job for job in _plan(panels, options) if job["name"] not in skip]
    batches: dict[tuple, list[dict[str, Any]]] = {}
    for job in jobs:
        batches.setdefault((job["operation"], job["strength"], job["image"].shape), []).append(job)
    for (operation, strength, _shape), group_jobs in batches.items():
        pipe = img2img if operation == "img2img" else inpaint
        multiple = _multiple(pipe)
        for start in range(0, len(group_jobs), max(1, options.batch_size)):
            chunk = group_jobs[start : start + options.batch_size]
            padded = [_pad(j["image"], multiple) for j in chunk]
            h, w = padded[0].shape[:2]
            kwargs = {
                **dict(options.extra),
                "prompt": [options.prompt] * len(chunk),
                "image": [Image.fromarray(p) for p in padded],
                "strength": strength,
                "num_inference_steps": options.steps,
                "guidance_scale": options.guidance_scale,
                "output_type": "np",
                "generator": [torch.Generator(info["device"]).manual_seed(j["seed"]) for j in chunk],
            }
            if options.negative_prompt:
                kwargs["negative_prompt"] = [options.negative_prompt] * len(chunk)
            if operation == "inpaint":
                masks = [np.pad(j["mask"], ((0, h - j["mask"].shape[0]), (0, w - j["mask"].shape[1]))) for j in chunk]
                kwargs.update(mask_image=[Image.fromarray(m.astype(np.uint8) * 255) for m in masks], height=h, width=w)
            with torch.inference_mode():
                images = pipe(**kwargs).images
            for job, generated in zip(chunk, images):
                hh, ww = job["image"].shape[:2]
                out = np.clip(np.rint(np.asarray(generated, np.float32)[:hh, :ww] * 255), 0, 255).astype(np.uint8)
                if operation == "inpaint":  # the pipeline's VAE touches every pixel: keep the rest exact
                    out = composite(out, job["image"], inner_alpha(job["mask"], 2.0))
                meta = {
                    **{k: v for k, v in info.items() if k != "model_path"},
                    "pipeline": info[f"{operation}_pipeline"],
                    "operation": f"diffusers_{operation}",
                    "strength": strength,
                    "steps": options.steps,
                    "guidance_scale": options.guidance_scale,
                    "prompt": options.prompt,
                    "negative_prompt": options.negative_prompt,
                    "seed": job["seed"],
                    "extra": dict(options.extra),
                }
                group = diffusers_group(operation, strength)
                yield DiffusersFake(job["key"], operation, group, out, job["mask"], meta, job["name"])


def plan_names(panels: Sequence[tuple[str, np.ndarray]], options: DiffusersOptions) -> list[str]:
    """The names of the fakes `generate_fakes` makes of `panels`, in the order a set lists them."""
    return [job["name"] for job in _plan(panels, options)]
