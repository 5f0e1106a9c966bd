"""The README's activation table is generated from the registry: it must be up to date
(``python tools/update_readme.py`` rewrites it after an activation is added or changed)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_activation_table_is_current():
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "update_readme.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, (
        "README.md's activation table is stale: run python tools/update_readme.py\n"
        + r.stdout
        + r.stderr
    )
