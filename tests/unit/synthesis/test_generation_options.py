"""generate.py's options: every mistake is refused before anything is made, and a folder never
holds images made with options or photos other than its stamp says."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hydra.errors import MissingConfigException

from datamodules.io import write_image
from synthesis.dataset import DatasetSpec, _generators
from synthesis.embedded import make_embedded_manifest
from synthesis.photos import stamped_table
from tests.helpers import compose_config


@pytest.mark.parametrize(("config", "override"), [("generate", "preset=cpu_divers"), ("train", "experiment=generatd")])
def test_a_mistyped_preset_or_experiment_is_refused_with_the_choices(config, override):
    """Both were optional defaults: a typo ran the full default generation, or the default training."""
    with pytest.raises(MissingConfigException, match="Could not find"):
        compose_config(config, [override])


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"seed": -1}, "seed must be 0 or more"),
        ({"ops": {"rerender": -1.0}}, r"operation rates must be 0 or more .*'rerender': -1"),
        ({"genuine_kinds": {"chart": -2}}, r"genuine_kinds counts must be 0 or more, got \{'chart': -2\}"),
        ({"max_side": 0}, r"panel sizes must be 1 px or more, got \{'max_side': 0\}"),
        ({"generator": {"variants": []}}, "generator.variants must name one variant or more"),
    ],
)
def test_negative_counts_and_empty_choices_are_refused(options, refusal):
    """A negative rate was read as 0, a negative seed or empty variants failed inside the run."""
    with pytest.raises(ValueError, match=refusal):
        DatasetSpec(**options)


def test_a_crop_count_for_a_category_the_photos_do_not_have_is_refused_before_the_stamp(tmp_path):
    spec = DatasetSpec(kind="forgery", crops_by_category={"photos": 12})
    with pytest.raises(
        ValueError, match="crops_by_category names photos, no category of these photos; they have .*coffee"
    ):
        stamped_table(tmp_path, spec, None, None)
    assert not (tmp_path / ".items").exists()


def _photos(folder, brightness):
    for i in range(3):
        write_image(folder / f"img{i}.png", np.full((80, 80, 3), brightness + i, np.uint8))
    return sorted(folder.glob("*.png"))


def test_photos_of_the_same_names_but_other_content_do_not_resume_a_folder(tmp_path):
    """The stamp held the photos' names only: the second set's run reused the first's images."""
    spec = DatasetSpec(kind="forgery")
    first = _photos(tmp_path / "A", 40)
    stamped_table(tmp_path / "out", spec, first, tmp_path / "A")
    stamped_table(tmp_path / "out", spec, first, tmp_path / "A")  # the same photos resume
    other = _photos(tmp_path / "B", 200)
    with pytest.raises(ValueError, match="generated from other photos"):
        stamped_table(tmp_path / "out", spec, other, tmp_path / "B")


def test_a_quickstart_set_remade_with_other_options_is_refused_not_mixed(tmp_path):
    """Files already there were kept: a re-run with another seed or crop size listed old images."""
    make_embedded_manifest(tmp_path, seed=0, crop_size=48, scales=(0.5,), max_crops_per_scale=1)
    make_embedded_manifest(tmp_path, seed=0, crop_size=48, scales=(0.5,), max_crops_per_scale=1)
    for other in ({"seed": 1, "crop_size": 48}, {"seed": 0, "crop_size": 64}):
        with pytest.raises(ValueError, match="holds a dataset made with other options or photos"):
            make_embedded_manifest(tmp_path, scales=(0.5,), max_crops_per_scale=1, **other)


def test_generator_weights_in_a_users_folder_trained_with_other_options_are_refused(tmp_path):
    """They were reused, and the dataset's stamp recorded the options asked, not those used."""
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "transposed.pt").write_bytes(b"weights")
    spec = DatasetSpec(generator={"variants": ["transposed"], "depth": 3, "dir": str(folder)})
    trained = {**spec.generator.training(), "depth": 2}
    (folder / "transposed.json").write_text(json.dumps({"training": trained, "seed": 5}))
    with pytest.raises(ValueError, match="transposed.pt was trained with other options .*depth 2 there, 3 asked"):
        _generators(spec, tmp_path / "out", [], None, False, Counter())
    (folder / "transposed.json").write_text(json.dumps({"training": spec.generator.training(), "seed": 5}))
    _, status = _generators(spec, tmp_path / "out", [], None, False, Counter())  # another seed's: reused
    assert status["transposed"].startswith("reused")
