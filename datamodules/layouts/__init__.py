"""Published dataset layouts -> `Record`s, with automatic detection.

Users arrive with public datasets as their authors ship them. Each reader turns one layout into the
same flat list of records (the manifest columns of docs/architecture.md), so every Dataset class, split
and metric sees one shape. `read_layout(path)` detects the layout where that is unambiguous; `layout=`
selects it explicitly. A tree that does not match says what was expected and what was found.

Layouts: `manifest` (CSV/JSONL), `folder` (`0_real`/`1_fake` at any depth), `genimage`
(`<generator>/.../{train,val}/{ai,nature}`), `fraudbench` (App. B.1), `imdl` (`Tp`/`Gt` [+ `Au`]
folders), `imdl_json` (`[[image, mask or "Negative"], ...]`), `casia_list` (MVSS text lists
`image mask label`), `themis` (`original`/`forged`/`mask` triplets paired by name).

One module per family of layouts (`genimage`, `fraudbench`, `manipulation` for the datasets with true
masks), their shared tree helpers in `files`, and `detection`, which tells them apart and dispatches.
"""

from datamodules.layouts.detection import LAYOUTS, detect_layout, read_layout, records_from_input
from datamodules.layouts.fraudbench import fraudbench_metadata, read_fraudbench
from datamodules.layouts.genimage import read_genimage
from datamodules.layouts.manipulation import read_casia_list, read_imdl, read_imdl_json, read_themis

__all__ = [
    "LAYOUTS",
    "detect_layout",
    "read_layout",
    "records_from_input",
    "read_genimage",
    "read_fraudbench",
    "fraudbench_metadata",
    "read_imdl",
    "read_imdl_json",
    "read_casia_list",
    "read_themis",
]
