"""What `report=html` adds to a scoring run: `infer.py` with and without it, on the same images (a script).

    python -m benchmarks.bench_report_overhead [--images 10000] [--size 256 192] [--detector npr_tiny]
                                               [--repeats 2] [--batch-size 64] [--num-workers 2]
                                               [--distinct N] [--workdir DIR]
    # a localizer (overlays and masks at the threshold drawn too):
    python -m benchmarks.bench_report_overhead --detector seg_tiny --images 2000

It writes `--images` generated JPEGs (smooth colour fields with noise, `--size` W H), an untrained
checkpoint of `--detector` (speed does not depend on the weights; a tiny fast model is the hard
case, since the report's work is per image while the model's share shrinks), then times
`infer.infer` end to end (model load, decode, score, CSV; with the report also the thumbnails,
overlays and the page) alternately without and with `report=html`, `--repeats` rounds each, in
the same process, after one unmeasured round that reads the images into the page cache. Each
figure is the best of its rounds (the machine may be shared; the best round is the least disturbed
one); `paired_overhead` and `paired_cpu_overhead` are the medians over rounds of each round with
the report against the round without it just before (the steadier figure where the load swings).
`--workdir` keeps the images there for the next run (the same
`--images`, `--size` and `--distinct` reuse them), so runs of two versions of the toolkit score the
same files. `overhead` = time with the report / time without - 1; the
target is at most 0.10. `cpu_overhead`: the same for the CPU seconds of all the run's threads (the work added, whether
or not idle cores hide it). `page_s` is the part spent writing the page after scoring (its pictures
were drawn during scoring by the map writer's thread; `page_drawn_later` counts those the page
had to draw itself, 0 in a one-process run). `--parts` also reports the CPU time of each part of the
report's work in microseconds per image (the thread time of the calls, whichever thread makes them:
shrinking to thumbnails in the decoding threads, drawing and encoding strips in the map writer's
thread, writing the page), from the rounds with the report; the timers cost a little themselves,
so the headline figures are best taken without it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from benchmarks.bench_inference import build_module

ROOT = Path(__file__).resolve().parents[1]


def write_images(folder: Path, count: int, width: int, height: int, distinct: int | None = None, seed: int = 0) -> None:
    """`count` JPEGs: a random smooth colour field with mild noise each (compresses like photographs,
    so 10,000 of them stay small on disk). With `distinct`, only that many are encoded and the
    rest are symbolic links to them (every file is still decoded and scored on its own)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    distinct = min(count, distinct or count)
    for index in range(distinct, count):
        (folder / f"{index:05d}.jpg").symlink_to(f"{index % distinct:05d}.jpg")
    for index in range(distinct):
        a, b, c = rng.uniform(0, 1, (3, 3, 1, 1))
        field = 127 + 100 * np.sin(a * xs / 20 + b * ys / 30 + c * 6)
        image = np.clip(field + rng.normal(0, 8, (3, height, width)), 0, 255).astype(np.uint8).transpose(1, 2, 0)
        Image.fromarray(image).save(folder / f"{index:05d}.jpg", quality=90)


def infer_config(model: Path, images: Path, output: Path, batch_size: int, num_workers: int, report: bool):
    """The config `python infer.py model=... input=... [report=html]` would get."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    overrides = [
        f"model={model}",
        f"input={images}",
        f"output={output}",
        f"batch_size={batch_size}",
        f"num_workers={num_workers}",
        "device=cpu",
        "progress=false",
        f"report={'html' if report else 'none'}",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="infer", overrides=overrides)
    GlobalHydra.instance().clear()
    return cfg


class PageTimer:
    """Times the page writing (`write_html_report`) and counts the rows whose pictures it drew itself."""

    def __init__(self) -> None:
        import inference.html_report as page_module

        self.module, self.original = page_module, page_module.write_html_report
        self.seconds, self.drawn_later = 0.0, 0
        original_draw = page_module.draw_row

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        def counted(*args, **kwargs):
            self.drawn_later += 1
            return original_draw(*args, **kwargs)

        page_module.write_html_report, page_module.draw_row = timed, counted
        self.original_draw = original_draw

    def close(self) -> None:
        self.module.write_html_report, self.module.draw_row = self.original, self.original_draw


class PartTimer:
    """Adds the thread CPU time of each call of the report's parts to `seconds[part]` (any thread)."""

    PARTS = {  # part: (module, function)
        "thumbnails (decoding threads)": ("inference.html_evidence", "thumbnail"),
        "pictures (writer thread, all)": ("inference.masks", "draw_evidence"),
        "pictures: of which encoding strips": ("inference.report_pictures", "encode_picture"),
        "pictures: of which creating strip files": ("inference.report_pictures", "write_strip_file"),
        "page (after scoring)": ("inference.html_report", "write_html_report"),
    }

    def __init__(self, seconds: dict[str, float]) -> None:
        import importlib
        import threading

        self.restore = []
        lock = threading.Lock()
        for part, (module_name, name) in self.PARTS.items():
            module = importlib.import_module(module_name)
            original = getattr(module, name, None)
            if original is None:  # an older version of the toolkit, without this part
                continue

            def timed(*args, _original=original, _part=part, **kwargs):
                start = time.thread_time()
                try:
                    return _original(*args, **kwargs)
                finally:
                    with lock:
                        seconds[_part] = seconds.get(_part, 0.0) + time.thread_time() - start

            setattr(module, name, timed)
            self.restore.append((module, name, original))

    def close(self) -> None:
        for module, name, original in self.restore:
            setattr(module, name, original)


def timed_run(cfg) -> tuple[float, float]:
    """(wall seconds, CPU seconds of every thread of this process) of one `infer.infer` run."""
    from infer import infer

    start, cpu = time.perf_counter(), time.process_time()
    infer(cfg)
    return time.perf_counter() - start, time.process_time() - cpu


def alternate_runs(model: Path, folder: Path, images: Path, args: argparse.Namespace) -> tuple[dict, dict, list, list]:
    """`infer` without and with `report=html`, alternately, `args.repeats` rounds each: (wall
    seconds, CPU seconds by kind, page seconds and pictures the page drew, by round). With
    `args.parts`, `args.parts` collects the thread CPU seconds of each part of the report."""
    times: dict[str, list[float]] = {"plain": [], "report": []}
    cpu: dict[str, list[float]] = {"plain": [], "report": []}
    page_seconds, drawn_later = [], []
    warm = folder / "warm" / "scores.csv"  # an unmeasured round first: the images into the page cache
    timed_run(infer_config(model, images, warm, args.batch_size, args.num_workers, False))
    shutil.rmtree(warm.parent)
    for _ in range(args.repeats):
        for kind in ("plain", "report"):
            output = folder / kind / "scores.csv"
            shutil.rmtree(output.parent, ignore_errors=True)
            cfg = infer_config(model, images, output, args.batch_size, args.num_workers, kind == "report")
            timer = PageTimer()
            parts = PartTimer(args.parts) if args.parts is not None and kind == "report" else None
            try:
                wall, used = timed_run(cfg)
            finally:
                timer.close()
                if parts is not None:
                    parts.close()
            times[kind].append(wall)
            cpu[kind].append(used)
            if kind == "report":
                page_seconds.append(timer.seconds)
                drawn_later.append(timer.drawn_later)
    return times, cpu, page_seconds, drawn_later


def scored_images(folder: Path, args: argparse.Namespace) -> Path:
    """The generated images: in `folder`, or kept in `--workdir` (and reused when complete there)."""
    if args.workdir is None:
        images = folder / "images"
    else:
        images = args.workdir / f"images-{args.images}-{args.size[0]}x{args.size[1]}-{args.distinct or 'all'}"
    complete = images.with_name(f"{images.name}.complete")  # beside the folder: only images in it
    if not complete.exists():
        shutil.rmtree(images, ignore_errors=True)
        write_images(images, args.images, *args.size, distinct=args.distinct)
        complete.write_text("")
    return images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--size", type=int, nargs=2, default=(256, 192), metavar=("W", "H"))
    parser.add_argument("--distinct", type=int, default=None, help="encode only this many images, link the rest")
    parser.add_argument("--detector", default="npr_tiny")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the images here, for the next run")
    parser.add_argument("--parts", action="store_true", help="also time each part of the report (see above)")
    args = parser.parse_args()
    args.parts = {} if args.parts else None
    torch.set_num_threads(args.threads)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        images = scored_images(folder, args)
        written = time.perf_counter() - start
        module = build_module(args.detector)
        model = folder / "model.ckpt"
        torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, model)
        times, cpu, page_seconds, drawn_later = alternate_runs(model, folder, images, args)
        files = folder / "report" / "scores_report_files"
        best = {kind: min(values) for kind, values in times.items()}
        result = {
            "detector": args.detector,
            "images": args.images,
            "image_size_wh": list(args.size),
            "distinct_images": min(args.images, args.distinct or args.images),
            "batch_size": args.batch_size,
            "num_workers": args.num_workers,
            "torch_threads": args.threads,
            "images_written_s": round(written, 1),
            "plain_s": round(best["plain"], 2),
            "report_s": round(best["report"], 2),
            "overhead": round(best["report"] / best["plain"] - 1, 4),
            "rounds_s": {kind: [round(v, 2) for v in values] for kind, values in times.items()},
            "cpu_s": {kind: round(min(values), 2) for kind, values in cpu.items()},
            "cpu_overhead": round(min(cpu["report"]) / min(cpu["plain"]) - 1, 4),
            # each round with the report against the round without it just before (the same minute's load)
            "paired_overhead": round(float(np.median(np.divide(times["report"], times["plain"]))) - 1, 4),
            "paired_cpu_overhead": round(float(np.median(np.divide(cpu["report"], cpu["plain"]))) - 1, 4),
            "page_s": round(min(page_seconds), 2),
            "page_drawn_later": max(drawn_later),
            "page_html_bytes": (folder / "report" / "scores_report.html").stat().st_size,
            "files_mb": round(sum(p.stat().st_size for p in files.rglob("*") if p.is_file()) / 1e6, 1),
        }
        if args.parts is not None:  # summed over the rounds with the report
            per_image = 1e6 / (args.images * args.repeats)
            result["parts_us_per_image"] = {part: round(s * per_image, 1) for part, s in args.parts.items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
