"""How the server starts Python child processes (intake processes, isolated Python models).

Why not plain ``python -m module``: ``-m`` puts the working directory first on ``sys.path``, so a
``ferry/`` folder (or any module named like one the child imports) in the directory the server was
started from would be imported instead of the installed package, running its code in the child.
The child gets the parent's import path without that entry (``-P``, Python 3.11+; on 3.10 a
bootstrap removes it before running the module).
"""

from __future__ import annotations

import sys

#: Python 3.10: drop the working directory ``-c`` put first, then run the module as ``-m`` would.
_BOOTSTRAP = (
    "import runpy, sys; sys.path.pop(0); module = sys.argv.pop(1); "
    "runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def python_module_command(module: str, *args: str) -> list[str]:
    """The command line running ``module`` with this interpreter, importing only installed code."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module, *args]
    return [sys.executable, "-c", _BOOTSTRAP, module, *args]
