"""Every install hint Ferry prints or writes works from the checkout.

``ferry`` and ``ferry-client`` are not Ferry's names on PyPI (``ferry[gpu]`` there installs another
project), so a hint must name the checkout: ``pip install '.[gpu]'``,
``pip install './clients/python[perf]'``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ferry.cli_errors import install_hint, missing_extra
from ferry_client.perf.extra import PERF_INSTALL_HINT

ROOT = Path(__file__).resolve().parents[2]
#: "install ferry[x]", "pip install 'ferry-client[perf]'", "install `ferry[torch]`" ...
BY_PYPI_NAME = re.compile(r"install\s+[`'\"]?ferry(-client)?\[", re.IGNORECASE)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    paths = [ROOT / name for name in names.splitlines()]
    return [p for p in paths if p.suffix in {".py", ".md", ".txt", ".toml", ".yaml", ".yml", ".pbtxt", ""}]


def test_no_hint_installs_by_a_pypi_name_ferry_does_not_own() -> None:
    found = []
    for path in tracked_text_files():
        if not path.is_file() or path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if BY_PYPI_NAME.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_printed_hints_name_the_checkout() -> None:
    assert install_hint("gpu") == "pip install '.[gpu]' in the Ferry checkout"
    assert "pip install '.[torch]' in the Ferry checkout" in str(missing_extra(ModuleNotFoundError(name="torch")))
    assert PERF_INSTALL_HINT.startswith("pip install '.[perf]' in the Ferry checkout")


def extra(pyproject: Path, name: str) -> list[str]:
    """The requirements of one extra (read as text: tomllib is not in Python 3.10)."""
    match = re.search(rf"^{name} = \[(.*?)\]$", pyproject.read_text(), re.S | re.M)
    assert match, f"{pyproject} has no {name} extra"
    return re.findall(r'"([^"]+)"', match.group(1))


def test_the_server_distribution_offers_the_clients_extras() -> None:
    """``pip install .`` already ships ferry_client, so ``./clients/python[perf]`` on top would leave two
    distributions owning its files: the server's own ``perf`` extra installs the same packages."""
    assert extra(ROOT / "pyproject.toml", "perf") == extra(ROOT / "clients" / "python" / "pyproject.toml", "perf")
    readme = (ROOT / "README.md").read_text()
    assert 'pip install ".[perf]"' in readme


def test_the_sample_images_have_an_extra() -> None:
    """clients/examples/make_images.py reads scikit-learn's digits and scikit-image's photos."""
    examples = extra(ROOT / "pyproject.toml", "examples")
    assert {re.split("[<>=]", r)[0] for r in examples} == {"scikit-learn", "scikit-image"}
    script = ROOT / "clients" / "examples" / "make_images.py"
    without_skimage = (  # the plain install: scikit-image cannot be imported
        f"import runpy, sys; sys.modules['skimage'] = None; sys.argv = ['make_images.py']; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    ran = subprocess.run([sys.executable, "-c", without_skimage], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1 and not ran.stdout
    assert ran.stderr.strip() == "make_images.py needs skimage: pip install '.[examples]' in the Ferry checkout"
