"""Activations as XLA custom calls: handlers of XLA's typed FFI compiled from the specs.

:mod:`.cpu` builds the CPU handlers (Numba cfuncs over the CPU loops, threaded on
XLA's own pool), :mod:`.gated` those of the gated forms over the fused gated loops (with
:mod:`.cpu`'s threading template); :mod:`._abi` reads XLA's call frames. The JAX bridge
(:mod:`iglu_np.jax`) registers them and calls them with ``jax.ffi.ffi_call``.
"""
