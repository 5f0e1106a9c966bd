"""One module per activation or family; importing this package registers them all.

Adding an activation is adding one module here that calls :func:`iglu_np._spec.define`.
"""

import importlib
import pkgutil

for _m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")
