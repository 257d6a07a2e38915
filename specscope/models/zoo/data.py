"""The zoo's corpus: the Python standard library's own sources, with held-out modules.

Training text is every `.py` file under `sysconfig.get_paths()["stdlib"]` except test suites
(folders named `test` or `tests`), `idlelib` and `site-packages`, in sorted path order. The
modules in `HELD_OUT_MODULES` never enter training: they are the validation text and the only
source of the built-in prompt sets, so held-out numbers measure code the models have not seen.
Modules are named by their path relative to the stdlib root, with forward slashes.
"""

from __future__ import annotations

import sysconfig
import tokenize
from pathlib import Path

from specscope.errors import InputError

EXCLUDED_DIRS = frozenset({"test", "tests", "idlelib", "site-packages"})
"""Folder names whose files are not corpus text, wherever they occur in a path."""

HELD_OUT_MODULES = (
    "xml/etree/ElementTree.py",
    "_pydecimal.py",
    "pkgutil.py",
    "tempfile.py",
    "calendar.py",
    "xml/dom/expatbuilder.py",
    "email/_parseaddr.py",
    "http/cookiejar.py",
    "wsgiref/handlers.py",
    "unittest/loader.py",
    "multiprocessing/connection.py",
    "site.py",
)
"""The 12 validation modules (0.6 MB of Python 3.11's 11.4 MB corpus), fixed once.

Chosen as the 12 smallest sha256("specscope-zoo-heldout:" + path) among Python 3.11 corpus files
of at least 16 kB outside `encodings/` (generated codec tables), `pydoc_data/` (one long string),
`distutils/` and `lib2to3/` (both removed from later Pythons).
"""


def stdlib_root() -> Path:
    """The folder of this interpreter's standard library sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_modules(root: Path | None = None) -> list[str]:
    """Every corpus module under `root` (default: this stdlib), sorted; held-out ones included."""
    root = root or stdlib_root()
    names = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if not EXCLUDED_DIRS.intersection(rel.parts[:-1]):
            names.append(rel.as_posix())
    if not names:
        raise InputError(f"{root}: no Python standard library sources found")
    return sorted(names)


def split_modules(root: Path | None = None) -> tuple[list[str], list[str]]:
    """(training modules, held-out modules) present under `root`, each sorted; disjoint."""
    names = corpus_modules(root)
    held_out = set(HELD_OUT_MODULES)
    heldout = [n for n in names if n in held_out]
    if not heldout:
        raise InputError(f"{root or stdlib_root()}: none of the held-out modules is present")
    return [n for n in names if n not in held_out], heldout


def read_module(name: str, root: Path | None = None) -> str:
    """The source text of corpus module `name`, decoded as its coding cookie says (PEP 263)."""
    with tokenize.open((root or stdlib_root()) / name) as fh:
        return fh.read()


def corpus_texts(part: str, root: Path | None = None) -> list[str]:
    """The sources of the "train" or "heldout" modules, in sorted module order."""
    if part not in ("train", "heldout"):
        raise InputError(f"corpus part {part!r} is not 'train' or 'heldout'")
    train, heldout = split_modules(root)
    return [read_module(n, root) for n in (train if part == "train" else heldout)]
