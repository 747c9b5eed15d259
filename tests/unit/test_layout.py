"""The domain's floors, as docs/development.md draws them: `counting.foundation`, `writepath`,
`features`, `rollup`, each importing only from itself and the floors before it; no module of the
domain imports `firebase_functions` (the handlers beside it do)."""

from __future__ import annotations

import ast
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "functions" / "counting"
FLOORS = ["foundation", "writepath", "features", "rollup"]


def imports(path: Path) -> set[str]:
    """Every module `path` imports, absolute (the domain imports absolutely)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"
            found.add(node.module or "")
    return found


def test_each_floor_imports_only_the_floors_before_it() -> None:
    upward = []
    for path in sorted(DOMAIN.rglob("*.py")):
        parts = path.relative_to(DOMAIN).parts
        if len(parts) == 1:
            continue  # counting/__init__.py
        floor = FLOORS.index(parts[0])
        for module in imports(path):
            names = module.split(".")
            if names[0] == "counting" and len(names) > 1 and FLOORS.index(names[1]) > floor:
                upward.append(f"{path.relative_to(DOMAIN)} imports {module}")
    assert upward == []


def test_no_domain_module_imports_cloud_functions() -> None:
    offenders = [str(path.relative_to(DOMAIN)) for path in sorted(DOMAIN.rglob("*.py"))
                 if any(m.split(".")[0] in ("firebase_functions", "flask", "handlers")
                        for m in imports(path))]
    assert offenders == []


def test_every_module_is_on_a_floor() -> None:
    folders = {path.relative_to(DOMAIN).parts[0] for path in DOMAIN.rglob("*.py")
               if len(path.relative_to(DOMAIN).parts) > 1}
    assert folders == set(FLOORS)


def test_the_wheel_lists_every_package_of_the_domain() -> None:
    """pyproject.toml names each package of `counting` (setuptools takes only those listed: a
    package left out is missing from the wheel a host's operator installs)."""
    import tomllib

    listed = set(tomllib.loads((DOMAIN.parents[1] / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["packages"])
    found = {".".join(("counting", *init.parent.relative_to(DOMAIN).parts))
             for init in DOMAIN.rglob("__init__.py")}
    assert found - listed == set()
