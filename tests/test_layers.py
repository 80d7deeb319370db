"""kebench's layers only point down (docs/architecture.md): a module imports from its
own layer or a lower one, never from a higher one.

Every import counts: at module level, inside a function, under ``if TYPE_CHECKING:``.
A deferred import still couples the modules, and a type-only one still says which
layer owns the type.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "kebench"

# Bottom to top; docs/architecture.md says what each layer holds. A module takes the
# layer of its top-level module or package, and one under no entry fails the test: a
# new top-level module must be given a layer here.
LAYERS = {
    # 1: the package root, the table schemas and small I/O helpers
    "kebench": 1,
    "kebench.schemas": 1,
    "kebench.atomic": 1,
    # 2: models and the forward/log-prob primitives
    "kebench.models": 2,
    # 3: the knowledge graph, rule mining, the shard engine
    "kebench.kg": 3,
    "kebench.rules": 3,
    "kebench.compute": 3,
    # 4: questions and probes
    "kebench.qa": 4,
    # 5: editing methods and the runner
    "kebench.editing": 5,
    # 6: scoring
    "kebench.scoring": 6,
    # 7: the Kedro glue, the command line and the project's own data
    "kebench.datasets": 7,
    "kebench.pipelines": 7,
    "kebench.hooks": 7,
    "kebench.settings": 7,
    "kebench.cli": 7,
    "kebench.__main__": 7,
    "kebench.project": 7,
    "kebench.pipeline_registry": 7,
    "kebench.third_party_warnings": 7,
    "kebench.demo": 7,
}
GLUE = 7


@dataclass(frozen=True)
class Import:
    file: Path
    line: int
    source: str  # the importing module
    target: str  # the imported kebench module

    def __str__(self) -> str:
        return f"{self.file.relative_to(SRC.parent)}:{self.line}"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int | None:
    """The layer of the top-level module or package ``module`` is in."""
    return LAYERS.get(".".join(module.split(".")[:2]))


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports_of(path: Path) -> list[Import]:
    """Every kebench module ``path`` imports, relative imports resolved; ``from a
    import b`` names the submodule ``a.b`` where one exists."""
    source = module_name(path)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        else:
            continue
        found += [
            Import(path, node.lineno, source, target)
            for target in dict.fromkeys(targets)
            if within(target, "kebench")
        ]
    return found


IMPORTS = [found for path in MODULES.values() for found in imports_of(path)]


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(name for name in MODULES if layer(name) is None)
    assert not unplaced, f"give these modules a layer in LAYERS: {unplaced}"


def test_imports_point_down() -> None:
    upward = [
        f"{i}: {i.source} (layer {layer(i.source)}) imports {i.target} "
        f"(layer {layer(i.target)})"
        for i in IMPORTS
        if None not in (layer(i.source), layer(i.target))
        and layer(i.target) > layer(i.source)
    ]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_editing_does_not_import_scoring() -> None:
    """Scoring reads edited models; editing must not need it to make one."""
    found = [
        f"{i}: {i.target}"
        for i in IMPORTS
        if within(i.source, "kebench.editing") and within(i.target, "kebench.scoring")
    ]
    assert not found, "kebench.editing imports kebench.scoring:\n" + "\n".join(found)


def test_domain_does_not_import_kedro_glue() -> None:
    found = [
        f"{i}: {i.target}"
        for i in IMPORTS
        if layer(i.source) != GLUE and within(i.target, "kebench.datasets")
    ]
    assert not found, "domain modules import kebench.datasets:\n" + "\n".join(found)
