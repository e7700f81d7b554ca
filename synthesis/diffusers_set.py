"""A generated set whose fakes a diffusers pipeline makes (`generate.py generator=diffusers`): the
genuine panels as `generate_dataset` cuts them, then the pipeline's fakes of each panel.

Every fake leaves a done marker under `.items/diffusers/` once its image, mask and JSON are
written, as the other generators' items do, so a killed or repeated run makes only the fakes not
yet on disk (with a real model on a CPU, minutes each). The set is stamped with the model, the
options, the dtype and the device (`DiffusersOptions.stamp`), so the fakes it resumes were made by
the same ones.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from synthesis.diffusers_backend import DiffusersOptions, generate_fakes, load_pipelines, plan_names

__all__ = ["make_diffusers_manifest"]


def make_diffusers_manifest(
    output: str | Path,
    spec: Any,
    options: DiffusersOptions,
    photos: Sequence[str | Path] | None = None,
    root: str | Path | None = None,
    workers: int = 1,
    progress: bool = True,
) -> tuple[Path, dict[str, Any]]:
    """Genuine panels as `generate_dataset` cuts them (same splits), then the pipeline's fakes of
    each panel not made by an earlier run under `fake/diffusers_<operation>/`, the contact sheet and
    `manifest.csv`; returns (manifest, summary)."""
    from datamodules.io import read_image, write_manifest
    from synthesis.contact_sheet import contact_sheet
    from synthesis.dataset import generate_dataset

    started = time.perf_counter()
    pipelines = load_pipelines(options)  # fail before cutting any panel when the pipeline is missing
    output = Path(output).resolve()
    # stamped with the panels' options: a set is resumed only with the same model and options
    spec = replace(spec, ops={}, backend=options.stamp(pipelines[2]))
    result = generate_dataset(output, spec, photos=photos, root=root, workers=workers, progress=progress)
    genuine = {Path(row["path"]).stem: row for row in result["rows"] if row["label"] == 0}
    panels = [(key, np.array(read_image(output / row["path"]))) for key, row in genuine.items()]
    fakes, reused = _fakes(output, genuine, panels, options, pipelines)
    rows = [*result["rows"], *(row for fragment in fakes for row in fragment["rows"])]
    sheet = contact_sheet(output, rows)
    manifest = output / "manifest.csv"
    write_manifest(
        (
            {**row, "path": str(output / row["path"]), "mask": str(output / row["mask"]) if row.get("mask") else None}
            for row in rows
        ),
        manifest,
    )
    return manifest, _summary(result["summary"], rows, fakes, reused, pipelines[2], sheet, started)


def _fakes(
    output: Path,
    genuine: dict[str, dict[str, Any]],
    panels: list[tuple[str, np.ndarray]],
    options: DiffusersOptions,
    pipelines: tuple[Any, Any, dict[str, Any]],
) -> tuple[list[dict[str, Any]], int]:
    """Every fake's done marker (rows and PSNR), in the set's order: read back where an earlier run
    left it with its files, else the fake is made now and its marker written after its files; and
    how many were read back."""
    from datamodules.io import read_image
    from synthesis.generator import psnr
    from synthesis.items import item_done, write_fragment
    from synthesis.operations import _write_fake

    names = plan_names(panels, options)
    fragments = {name: item_done({"output": str(output), "id": f"diffusers/{name}"}) for name in names}
    reused = {name for name, fragment in fragments.items() if fragment is not None}
    for fake in generate_fakes(panels, options, pipelines, skip=reused):
        panel = genuine[fake.key]
        row = _write_fake(
            output, f"diffusers_{fake.operation}", fake.name, fake.image, fake.mask, panel, fake.group, fake.meta
        )
        fidelity = round(psnr(fake.image, read_image(output / panel["path"])), 3)
        fragments[fake.name] = {"rows": [row], "pairs": [], "psnr": {fake.group: fidelity}}
        write_fragment(output, f"diffusers/{fake.name}", fragments[fake.name])
    return [fragments[name] for name in names], len(reused)


def _summary(
    panels: dict[str, Any],
    rows: list[dict[str, Any]],
    fakes: list[dict[str, Any]],
    reused: int,
    info: dict[str, Any],
    sheet: Path | None,
    started: float,
) -> dict[str, Any]:
    """The panels' summary with the fakes counted in: made now and reused from an earlier run."""
    from synthesis.summary import dataset_summary

    counts = Counter(made=panels["made"] + len(fakes) - reused, reused=panels["reused"] + reused)
    model = f"{info['model']} ({info['img2img_pipeline']}, {info['dtype']} on {info['device']})"
    return {
        **panels,
        **dataset_summary(rows, [], fakes, counts, Counter(panels.get("skipped", {}))),
        "items": panels["items"] + len(fakes),
        "generators": {"diffusers": f"{model}: {len(fakes) - reused} fakes made, {reused} reused from an earlier run"},
        "contact_sheet": str(sheet) if sheet else None,
        "seconds": round(time.perf_counter() - started, 1),
    }
