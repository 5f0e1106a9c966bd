"""iglu_np: activation functions as fast, accurate numpy ufuncs (Numba), built around IGLU.

Every activation ``iglu_np.<name>`` is generated from its declarative spec in
``iglu_np/activations``: call it for the forward value; ``.dx``, ``.dparams``,
``.backward`` and ``.backward_params`` give the derivatives, ``.ufunc`` the raw ufunc.
``iglu_np.ACTIVATIONS`` maps every name to its activation object. ``iglu_np.ALIASES``
maps other names in use (Hugging Face transformers' ``ACT2FN``: ``quick_gelu``,
``gelu_new``, ``relu6`` ...) to ``(activation name, parameter values)``; ``iglu_np.get``
and ``iglu_np.<alias>`` give them as activation objects with those values as defaults.
``iglu_np.<name>.glu`` is the gated form ``act(gate) * up`` of every activation;
``iglu_np.GATED`` holds the named ones (``swiglu``, ``geglu``, ``glu``, ``swiglu_oai`` ...),
and ``iglu_np.get_gated`` finds either by name.
"""

from types import MappingProxyType as _MappingProxy

from . import _forksafe  # noqa: F401  (registers the fork hook before any thread starts)
from ._aliases import ALIASES
from ._api import Activation, Alias, _acts, _alias_objects, get, get_gated
from ._api import gated_forms as _gated_forms
from ._gated import Gated
from .stats import tail_index

__version__ = "0.1.0"

ACTIVATIONS = _MappingProxy(_acts())
globals().update(ACTIVATIONS)
globals().update(_alias_objects())
GATED = _MappingProxy(_gated_forms())
globals().update(GATED)

__all__ = [
    "ACTIVATIONS",
    "ALIASES",
    "Activation",
    "Alias",
    "GATED",
    "Gated",
    "get",
    "get_gated",
    "tail_index",
    "__version__",
    *ACTIVATIONS,
    *ALIASES,
    *GATED,
]
