"""Redraw docs/report_example.png, the README's picture of the reviewers' page (a script beside the
benchmarks: like their figures, the picture is made by a command anyone can rerun).

    python -m benchmarks.report_screenshot [--folder /tmp/report_example] [--png docs/report_example.png]

Six bundled photos, two with a patch of stronger noise (as a splice from another camera leaves),
scored by the training-free `noise_level` localizer with `report=html`, the page shot in headless
Chromium at 1200 x 900. Paths are relative to `--folder`, so the page shows short names.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "camera.png", "motorcycle_left.png"]
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def write_evidence(folder: Path, seed: int = 0) -> None:
    from datamodules.io import read_image, write_image
    from synthesis.embedded import bundled_photo_paths

    rng = np.random.default_rng(seed)
    photos = {p.name: p for p in bundled_photo_paths()}
    for index, name in enumerate(PHOTOS):
        image = read_image(photos[name])[:512, :512]
        if index in (0, 3):
            height, width = image.shape[0] // 4, image.shape[1] // 4
            y, x = image.shape[0] // 3, image.shape[1] // 3
            patch = image[y : y + height, x : x + width].astype(float) + rng.normal(0, 14, (height, width, 3))
            image[y : y + height, x : x + width] = patch.clip(0, 255).astype(np.uint8)
        write_image(folder / f"claim_{index}_{Path(name).stem}.png", image)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/report_example"))
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "report_example.png")
    parser.add_argument("--browser", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from benchmarks.bench_inference import build_module
    from benchmarks.bench_report_overhead import infer_config
    from infer import infer

    png = args.png.resolve()
    shutil.rmtree(args.folder, ignore_errors=True)
    write_evidence(args.folder / "evidence")
    module = build_module("noise_level")
    checkpoint = {"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}
    torch.save(checkpoint, args.folder / "noise_level.ckpt")
    os.chdir(args.folder)
    infer(infer_config(Path("noise_level.ckpt"), Path("evidence"), Path("scores.csv"), 8, 0, report=True))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.browser, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto((args.folder / "scores_report.html").resolve().as_uri())
        page.wait_for_load_state("load")
        page.evaluate("Promise.all(Array.from(document.images).map(i => i.decode()))")
        page.screenshot(path=str(png))
        browser.close()
    print(png)


if __name__ == "__main__":
    main()
