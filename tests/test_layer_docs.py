"""The layer table of docs/design.md ("Layers") is generated from the code: ranks and roles from
``LAYERS`` in tests/import_graph.py, imports read from the source. A new package, a new import
between packages or a changed role makes this fail until the table is regenerated."""

from __future__ import annotations

from import_graph import DOC, LAYERS, PACKAGES, docs_block, markdown


def test_the_docs_layer_table_is_the_generated_one():
    assert docs_block(DOC.read_text()) == markdown(), (
        "docs/design.md's layer table differs from the code's; regenerate it with "
        "`python tests/import_graph.py --update-docs`"
    )


def test_every_package_has_a_role():
    assert sorted(LAYERS) == sorted(PACKAGES)
    assert all(role and "\n" not in role and "|" not in role for _, role in LAYERS.values())
