"""Math typeset at build time as MathML, so the pages need no script and no network.

Sphinx's default renderer writes the TeX into the page and loads MathJax from a CDN: read
offline, or behind a proxy, every formula shows as raw TeX. This renderer converts each
formula with docutils' own LaTeX-to-MathML translator (docutils comes with Sphinx) and
writes the ``<math>`` element into the HTML, which every current browser typesets
natively. A formula the translator cannot read is a build warning (an error under ``-W``)
naming the page and line, never raw TeX on a page.
"""

from __future__ import annotations

import inspect

from docutils import nodes
from docutils.utils.math import latex2mathml
from sphinx.util import logging

logger = logging.getLogger(__name__)

# docutils >= 0.19 names the display flag ``as_block``; 0.18 has ``inline`` (its negation)
_AS_BLOCK = "as_block" in inspect.signature(latex2mathml.tex2mathml).parameters


def _mathml(translator, node, tex: str, block: bool) -> str:
    try:
        if _AS_BLOCK:
            return latex2mathml.tex2mathml(tex, as_block=block)
        return latex2mathml.tex2mathml(tex, inline=not block)
    except Exception as e:  # noqa: BLE001  (the translator raises several kinds)
        logger.warning("cannot typeset %r as MathML: %s", tex, e, location=node)
        return translator.encode(tex)


def visit_math(self, node: nodes.math) -> None:
    self.body.append(self.starttag(node, "span", "", CLASS="math notranslate nohighlight"))
    self.body.append(_mathml(self, node, node.astext(), block=False) + "</span>")
    raise nodes.SkipNode


def visit_displaymath(self, node: nodes.math_block) -> None:
    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    if node["number"]:
        self.body.append(f'<span class="eqno">({node["number"]})</span>')
    # blank lines separate equations, as in Sphinx's other renderers
    for part in (p for p in node.astext().split("\n\n") if p.strip()):
        self.body.append(_mathml(self, node, part, block=True))
    self.body.append("</div>\n")
    raise nodes.SkipNode


def setup(app):
    app.add_html_math_renderer("mathml", (visit_math, None), (visit_displaymath, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
