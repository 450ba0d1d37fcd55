"""Text that explains itself: citations, no internal references, no stale claims.

- Every validation case with a published reference figure cites its source (shown by validate).
- The user-facing docs carry no internal issue numbers and no "still landing" placeholders.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runner import registry

registry.load_all()
ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


class _AnyMetrics(dict):
    """Metrics of a point, whatever a case reads: each key gives 1."""

    def __missing__(self, key):
        return True if key == "correct" else 1


def _fake_runner(kind, points):
    return [_AnyMetrics() for _ in points]


@pytest.mark.parametrize("name", sorted(registry.CASES))
def test_cases_with_published_figures_cite_them(name):
    case = registry.CASES[name]
    rows = case.run(_fake_runner)
    if any(r.reference is not None for r in rows):
        assert case.source, f"case {name} shows reference figures but cites no source"
    if case.source:
        assert re.search(r"\b(19|20)\d\d\b", case.source), "a citation names its year"


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_docs_have_no_internal_references(path):
    text = path.read_text()
    # "issue #4" is the tracker's; a journal's "vol. 43, issue 3" is a citation.
    assert not re.search(r"\bissue #\d+", text, flags=re.I), f"{path}: internal issue number"
    bare = re.search(r"(?<!, )\bissues? \d+", text, flags=re.I)  # not "vol. 43, issue 3"
    assert not bare, f"{path}: internal issue number {bare.group(0)!r}"
    assert "still landing" not in text


# -- references in the docs resolve -------------------------------------------------------------
#: Top-level folders of the repository: a path in the docs that starts with one names a file.
#: Top-level folders of the source tree; `out/` (the runs' outputs) and the virtualenv's
#: install metadata are made by runs, not part of the tree a doc may name.
TOP = sorted(
    p.name
    for p in ROOT.iterdir()
    if p.is_dir()
    and not p.name.startswith(".")
    and p.name not in {"out"}
    and not p.name.endswith(".egg-info")
)
#: Every file of the tree by base name, for bare names such as `wsgrad.py`.
BASENAMES = {
    p.name
    for top in TOP
    for p in (ROOT / top).rglob("*")
    if p.is_file() and ".venv" not in p.parts and "__pycache__" not in p.parts
}
#: Packages whose dotted names in the docs are modules (config keys such as
#: `wafer.pe.sram_bytes` share a first word with them and are told apart by resolution).
PACKAGES = [p for p in TOP if (ROOT / p / "__init__.py").is_file()]
#: First words that are also config sections (`wafer.pe.sram_bytes`, `memoryx.optimizer`) or the
#: program API's variables (`pe.zeros`): a name under them is checked only when it reaches a
#: module below the package (`pe.isa.TensorUnit`).
AMBIGUOUS = {"wafer", "cs2", "memoryx", "swarmx", "pe", "fabric"}
_CODE = re.compile(r"`((?:[^`\n]|\n(?!\n))+)`")  # a code span may wrap, not cross a paragraph
_PATH = re.compile(rf"(?<![\w./<-])(?:{'|'.join(map(re.escape, TOP))})/[\w./*-]*")
_BARE = re.compile(r"^[\w-]+\.(?:py|md|toml)$")
_DOTTED = re.compile(rf"^({'|'.join(PACKAGES)})((?:\.\w+)+)(?:\(.*\))?$")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _code_spans(text: str) -> list[str]:
    """Inline code and the lines of fenced blocks."""
    fenced = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    inline = [
        " ".join(span.split()) for span in _CODE.findall(re.sub(r"```.*?```", "", text, flags=re.S))
    ]
    return inline + [line for block in fenced for line in block.splitlines()]


def _defines(path: Path) -> set[str]:
    import ast

    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update(t.id for t in elts if isinstance(t, ast.Name))
                if isinstance(target, ast.Name) and target.id == "__all__":
                    names.update(ast.literal_eval(node.value))  # exported, maybe imported lazily
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _module_file(dotted: str) -> Path | None:
    base = ROOT / Path(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def stale_references(path: Path) -> list[str]:
    """What a doc names that the tree does not have: files and folders from the repository root
    (`pe/isa.py`, `workloads/wafer/scenarios/`), bare file names (`wsgrad.py`, found anywhere in
    the tree), dotted names of first-party modules and what they define (`pe.isa.TensorUnit`),
    and links to other docs with their anchors."""
    text = path.read_text()
    bad = []
    for span in _code_spans(text):
        for match in _PATH.finditer(span):
            ref = match.group(0).rstrip(".")
            if span[match.end() : match.end() + 1] in ("[", "<") or not (
                ref.endswith("/") or "." in ref.rsplit("/", 1)[-1]
            ):
                continue  # a component (`wafer/pe[1,0]`, `memoryx/io`), a pattern (`test_<hw>`)
            if not (any(ROOT.glob(ref)) if "*" in ref else (ROOT / ref).exists()):
                bad.append(ref)
        word = span.strip()
        if _BARE.match(word) and word not in BASENAMES:
            bad.append(word)
        dotted = _DOTTED.match(word)
        if dotted:
            parts = (dotted.group(1) + dotted.group(2)).split(".")
            cut = max(i for i in range(1, len(parts) + 1) if _module_file(".".join(parts[:i])))
            module, rest = _module_file(".".join(parts[:cut])), parts[cut:]
            if cut == 1 and parts[0] in AMBIGUOUS:
                continue
            if (rest and rest[0] not in _defines(module)) or (
                len(rest) > 1 and not re.search(rf"\b{rest[-1]}\b", module.read_text())
            ):
                bad.append(word)
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            bad.append(target)
    return bad


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, -1, -2...
    for repeats."""
    seen: dict[str, int] = {}
    out = set()
    body = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for heading in re.findall(r"^#+ (.+)$", body, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_docs_name_only_what_exists(path):
    """Every file, module and link a doc names resolves in the tree (moved code leaves no stale
    path behind)."""
    assert stale_references(path) == []


def test_the_reference_check_finds_what_is_missing(tmp_path):
    (tmp_path / "other.md").write_text("# A heading, with `code`\n\n## Twice\n\n## Twice\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "`pe/isa.py` `pe/gone.py` `workloads/wafer/scenarios/` `fabric/nowhere/` `wsgrad.py` "
        "`cs2.py` `pe.isa.TensorUnit` `pe.isa.NoSuchUnit` `wafer.pe.sram_bytes` "
        "`wafer/pe[1,0]` `memoryx/io` `tests/test_<hw>_*.py` `tests/test_pe_*.py`\n\n"
        "```\npython bench/wafer_bench.py\npython bench/gone_bench.py\n```\n\n"
        "[ok](other.md#a-heading-with-code) [ok](other.md#twice-1) [gone](gone.md) "
        "[bad anchor](other.md#nowhere) [web](https://example.org/x.md)\n"
    )
    assert stale_references(doc) == [
        "pe/gone.py",
        "fabric/nowhere/",
        "cs2.py",
        "pe.isa.NoSuchUnit",
        "bench/gone_bench.py",
        "gone.md",
        "other.md#nowhere",
    ]
