"""Source text that child-process scripts start with to count Numba compiles.

``COUNT_COMPILES`` wraps ``numba.core.compiler.compile_extra`` (the entry point of every
compile; a cache hit never reaches it) so that ``n[0]`` counts the compiles the child
makes. Tests prepend it to the script they run with ``python -c``.
"""

import textwrap

COUNT_COMPILES = textwrap.dedent("""
    from numba.core import compiler
    n = [0]
    real = compiler.compile_extra
    def counting(*a, **k):
        n[0] += 1
        return real(*a, **k)
    compiler.compile_extra = counting
""")
