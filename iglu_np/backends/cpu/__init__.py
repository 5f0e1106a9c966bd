"""The CPU target: numpy ufuncs and njit loops compiled from the specs' kernels.

* :mod:`.backend`: the dispatcher's CPU backend (the general path);
* :mod:`.tiers`: the thin path of numpy arrays, the tiers of small calls, the threads;
* :mod:`.reductions`: the loops' operands and their parameter-gradient reductions;
* :mod:`.ufuncs`: the numpy ufuncs (general: any layout, broadcasting, ``out=``);
* :mod:`.loops`: the njit loops over flat memory (vectorised, threaded), compiled from
  the source :mod:`.loop_source` writes;
* :mod:`._direct`, :mod:`._cache_dir`, :mod:`._cache`, :mod:`._cache_report`,
  :mod:`._wide`: loading cached ufuncs without Numba, where the cache lives, Numba's
  cache locator, cache warnings, wide vector code.

Importing this package imports none of them.
"""
