"""iglu_np: activation functions as fast, accurate numpy ufuncs (Numba), built around IGLU.

Every activation ``iglu_np.<name>`` is generated from its declarative spec in
``iglu_np/activations``: call it for the forward value; ``.dx``, ``.dparams``,
``.backward`` and ``.backward_params`` give the derivatives, ``.ufunc`` the raw ufunc.
``iglu_np.ACTIVATIONS`` maps every name to its activation object.
"""
from types import MappingProxyType as _MappingProxy

from . import _forksafe  # noqa: F401  (registers the fork hook before any thread starts)
from ._api import Activation, _acts, get
from .stats import tail_index

__version__ = "0.1.0"

ACTIVATIONS = _MappingProxy(_acts())
globals().update(ACTIVATIONS)

__all__ = ["ACTIVATIONS", "Activation", "get", "tail_index", "__version__", *ACTIVATIONS]
