"""The installed package: py.typed and the extensions' type stubs (roformer/_rope.pyi, _engine.pyi),
which must name exactly the classes, methods, properties and functions the extensions define."""
import ast
import os

import pytest

import roformer
from roformer import _engine, _rope

PACKAGE = os.path.dirname(roformer.__file__)


def public(names):
    return {n for n in names if not n.startswith("_") or n in ("__init__", "__len__")}


@pytest.mark.parametrize("module", [_rope, _engine], ids=["_rope", "_engine"])
def test_the_stubs_name_what_the_extension_defines(module):
    path = os.path.join(PACKAGE, module.__name__.rsplit(".", 1)[-1] + ".pyi")
    tree = ast.parse(open(path, encoding="utf-8").read())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert set(classes) | functions == public(vars(module))
    for name, node in classes.items():
        members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        assert members == public(vars(getattr(module, name))), name


def test_the_package_is_typed():
    assert os.path.exists(os.path.join(PACKAGE, "py.typed"))
