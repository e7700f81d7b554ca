"""Where a scoring run's rows go: one process streaming into the output, or many processes (ranks of
`devices=N num_nodes=M`, jobs of `shard=i/n`) each writing a part file that is merged in input order.

The processes are launched and synchronised by Lightning Fabric (torchrun, SLURM and its own
launcher are all understood); this module only decides who scores what and who merges.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from datamodules.records import Record, SettingError
from inference.masks import PixelReduction
from inference.parts import (
    Shard,
    done_paths,
    fold_parts,
    known_labels,
    merge_parts,
    part_files,
    part_path,
    remove_parts,
    write_in_order,
)
from inference.runtime import Runtime
from inference.scoring import score_items
from inference.writer import ResultWriter, parse_row

log = logging.getLogger(__name__)


@dataclass
class Processes:
    """This process's place in the run: rank, world size, the device it scores on, and whether that
    device was chosen for the user (`device=auto` with Fabric processes) rather than asked for."""

    rank: int = 0
    world_size: int = 1
    device: str = "auto"
    fabric: Any = None
    device_chosen: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.fabric is not None:
            self.fabric.barrier()

    def total(self, counts: dict[str, int]) -> dict[str, int]:
        """Counts summed over all processes (every rank gets the sum)."""
        if self.fabric is None:
            return counts
        import torch

        keys = sorted(counts)
        summed = self.fabric.all_reduce(torch.tensor([counts[k] for k in keys], dtype=torch.float64), reduce_op="sum")
        return {k: int(v) for k, v in zip(keys, summed.tolist())}


def launch(devices: int | str = 1, num_nodes: int = 1, strategy: str = "auto", device: str = "auto") -> Processes:
    """One process for `devices=1 num_nodes=1` (nothing imported); otherwise Fabric starts (or, under
    torchrun / SLURM, joins) one process per device and returns this one's place."""
    if str(devices) == "1" and int(num_nodes) == 1:
        return Processes(device=device)
    try:
        from lightning.fabric import Fabric
    except ImportError:  # a torch-free install (onnxruntime only) scores in one process
        raise SettingError(
            f"devices={devices} num_nodes={num_nodes}: one process per device is started by Lightning Fabric, "
            "which is not installed (pip install lightning); score in one process (devices=1), or split the "
            "input into shard=i/n jobs, which need no Lightning"
        ) from None
    accelerator = {"auto": "auto", "cpu": "cpu"}.get(device, "cuda")
    fabric = Fabric(accelerator=accelerator, devices=devices, num_nodes=int(num_nodes), strategy=strategy)
    fabric.launch()
    where = fabric.device
    name = "cpu" if where.type == "cpu" else f"{where.type}:{where.index or 0}"
    log.info("process %d of %d scores on %s", fabric.global_rank, fabric.world_size, name)
    return Processes(fabric.global_rank, fabric.world_size, name, fabric, device_chosen=device == "auto")


@dataclass
class ScoredRun:
    """What a scoring run did: ok / error / skipped counts and, in the process that reports, every
    input's row in input order (score and label parsed) without reading the output back."""

    counts: dict[str, int]
    rows: list[dict[str, Any]] | None = None


def score_to_output(
    runtime: Runtime,
    records: Sequence[Record],
    output: Path,
    columns: Sequence[str],
    processes: Processes,
    shard: Shard = Shard(),
    resume: bool = False,
    pixel: PixelReduction | None = None,
    **options: Any,
) -> ScoredRun:
    """Score `records` (this shard of them) into `output`.

    One process and no shard: rows stream straight into the output and stay in memory (leftover
    part files of an interrupted multi-process run are merged first on resume, dropped otherwise;
    a resumed file is rewritten in input order from memory at the end, so it equals an
    uninterrupted run's). Otherwise each process appends to its part file and, without a shard,
    rank 0 merges all parts at the end. `pixel` reduces the maps: those saved now as they are
    written, those of rows already there (resume, other processes) read from their files.
    """
    if processes.world_size == 1 and shard.count == 1:
        return score_into_output(runtime, records, output, columns, resume, pixel, **options)
    return score_into_parts(runtime, records, output, columns, processes, shard, resume, pixel, **options)


def score_into_output(
    runtime: Runtime,
    records: Sequence[Record],
    output: Path,
    columns: Sequence[str],
    resume: bool,
    pixel: PixelReduction | None,
    **options: Any,
) -> ScoredRun:
    """One process, no shard: rows stream into `output` and stay in memory (see `score_to_output`)."""
    if part_files(output):
        merge_parts(output, records, columns) if resume else remove_parts(output)
    with ResultWriter(output, columns, resume=resume, truth=known_labels(records), rescore=True) as writer:
        todo = [(i, p) for i, p in Shard().items(records) if p not in writer.done]
        if pixel is not None:
            reduce_saved_maps(pixel, records, writer.done.values())
        collect = pixel.add if pixel is not None else None
        counts = score_items(runtime, todo, writer, collect_map=collect, **options)
    if len(todo) < len(records):  # resumed rows were appended: back to input order
        ordered = write_in_order(output, writer.done, records, columns)
    else:
        ordered = writer.written
    return ScoredRun({**counts, "skipped": len(records) - len(todo)}, [parse_row(r) for r in ordered])


def score_into_parts(
    runtime: Runtime,
    records: Sequence[Record],
    output: Path,
    columns: Sequence[str],
    processes: Processes,
    shard: Shard,
    resume: bool,
    pixel: PixelReduction | None,
    **options: Any,
) -> ScoredRun:
    """Several processes or one shard: each process appends to its part file; without a shard, rank 0
    merges all parts at the end (see `score_to_output`)."""
    if processes.is_main:
        if not resume:
            remove_parts(output, shard)
            if shard.count == 1:
                output.unlink(missing_ok=True)
        elif shard.count == 1 and part_files(output):
            merge_parts(output, records, columns)  # fold an interrupted run's parts in before splitting anew
    processes.barrier()
    done = done_paths(output, shard) if resume else set()
    processes.barrier()  # every process has read the same state before anyone appends to it
    mine = shard.items(records)
    todo = [item for item in mine if item[1] not in done]
    part = part_path(output, shard, processes.rank)
    with ResultWriter(part, columns, resume=True, truth=known_labels(records), rescore=True) as writer:
        counts = score_items(runtime, todo[processes.rank :: processes.world_size], writer, **options)
    counts = processes.total(counts)
    processes.barrier()
    rows = None
    if shard.count == 1 and processes.is_main:
        rows = merged_rows(output, records, columns, pixel)
    elif shard.count > 1:
        log.info(
            "shard %d/%d done in %s; when every shard is done: python infer.py merge=true (same "
            "model, input and output)",
            shard.index,
            shard.count,
            part_files(output, shard)[0].parent,
        )
    processes.barrier()
    return ScoredRun({**counts, "skipped": len(mine) - len(todo)}, rows)


def merged_rows(
    output: Path, records: Sequence[Record], columns: Sequence[str], pixel: PixelReduction | None = None
) -> list[dict[str, Any]]:
    """Fold the part files of other processes or jobs into `output`; their rows (parsed, in input
    order), and their saved maps reduced into `pixel`."""
    rows, missing = fold_parts(output, records, columns)
    if missing:
        log.warning(
            "%d inputs have no row in %s yet: run their shards (resume=true), then merge again", missing, output
        )
    if pixel is not None:
        reduce_saved_maps(pixel, records, rows)
    return [parse_row(row) for row in rows]


def reduce_saved_maps(pixel: PixelReduction, records: Sequence[Record], rows: Any) -> None:
    """Add the maps that `rows` (written earlier, by this run or others) name to `pixel`."""
    position: dict[str, int] = {}
    for i, record in enumerate(records):
        position.setdefault(record.path, i)
    for row in rows:
        if row.get("status") == "ok" and row.get("mask") and row["path"] in position:
            pixel.add_saved(position[row["path"]], row["mask"])
