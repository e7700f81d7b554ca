"""Start-up of scoring with a `.ckpt`: what loading the detector costs beyond importing torch.

    PYTHONPATH=. python benchmarks/bench_ckpt_startup.py [--repeats 5] [--output FILE.json]

Each measurement is a new Python process, so every import is paid as a user pays it:
- `import torch` alone: the reference, a floor no `.ckpt` path can go below;
- `inference.runtime.load_runtime(model.ckpt)`: the detector rebuilt from the checkpoint (and
  whether Lightning was imported on the way);
- `inference.runtime.load_checkpoint(model.ckpt)`: the whole training `DetectorModule` (Lightning),
  which the `.ckpt` scoring path used to build;
- `python infer.py model=model.ckpt input=one.png`: the whole command on one image.
Rounds run the three in turn, so they share the machine's load; each figure is the median over
the rounds, and each ratio the median of the per-round ratios to the reference. Untrained tiny NPR
(start-up does not depend on the weights); CPU only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LOAD = (
    "import sys; from inference.runtime import load_runtime; load_runtime(sys.argv[1], 'cpu'); "
    "print(json.dumps({'lightning': 'lightning' in sys.modules}))"
)
MODULE = "import sys; from inference.runtime import load_checkpoint; load_checkpoint(sys.argv[1])"


def write_model(folder: Path) -> Path:
    import torch

    from detectors.module import DetectorModule

    torch.manual_seed(0)
    net = {
        "_target_": "detectors.npr.NPR",
        "width": 8,
        "layers": [1, 1],
        "block": "basic",
        "preprocess": {"size": 32, "mode": "center_crop"},
    }
    module = DetectorModule(net=net, name="npr")
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, folder / "model.ckpt")
    return folder / "model.ckpt"


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    return time.perf_counter() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    from PIL import Image

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        model = write_model(work)
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)).save(work / "one.png")
        commands = {
            "import_torch": [sys.executable, "-c", "import torch"],
            "load_runtime": [sys.executable, "-c", f"import json; {LOAD}", str(model)],
            "load_lightning_module": [sys.executable, "-c", MODULE, str(model)],
            "infer_one_image": [
                sys.executable,
                str(ROOT / "infer.py"),
                f"model={model}",
                "input=one.png",
                "output=out.csv",
                "progress=false",
                "num_workers=0",
            ],
        }
        timed(commands["import_torch"], work)  # warm the file cache
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        lightning = None
        for _ in range(args.repeats):
            for name, command in commands.items():
                elapsed, out = timed(command, work)
                seconds[name].append(elapsed)
                if name == "load_runtime":
                    lightning = json.loads(out.strip().splitlines()[-1])["lightning"]
    reference = seconds["import_torch"]
    result = {
        "repeats": args.repeats,
        "median_s": {name: round(statistics.median(values), 3) for name, values in seconds.items()},
        "ratio_to_import_torch": {
            name: round(statistics.median(v / r for v, r in zip(values, reference)), 3)
            for name, values in seconds.items()
            if name != "import_torch"
        },
        "load_runtime_imports_lightning": lightning,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
