"""MkDocs hook: the reST roles docstrings use, shown as plain code in the API reference.

The docstrings name things the Sphinx way (:class:`Coordinator`, :meth:`approve`), which
mkdocstrings renders as the role's text followed by the code span. This drops the role and
keeps the code span (a leading ``~``, Sphinx's "last part only", is dropped as well).
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const):(<code>)~?")


def strip_roles(html: str) -> str:
    """``:class:<code>X</code>`` -> ``<code>X</code>``."""
    return ROLE.sub(r"\1", html)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return strip_roles(html)
