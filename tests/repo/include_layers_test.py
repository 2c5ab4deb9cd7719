#!/usr/bin/env python3
"""The layers are enforced: every #include "..." in src/, include/, tools/ and python/ must point
at the including file's own layer or one above it in docs/design.md's Architecture table (a layer
the text says "depends on core alone" may use only core), a kernel backend folder
(src/ops/<backend>/) may not include another backend's folder, and an include of ours
("mixprec/...", "ops/...") must name a header that exists. The layer order is read from the
table itself, so the document and the check cannot drift apart.
Usage: include_layers_test.py REPO_ROOT   (exit 1 listing every violation)"""
import re
import sys
from pathlib import Path

ROOTS = ("src", "include", "tools", "python")
UMBRELLA = "include/mixprec/mixprec.h"
GENERATED = {"include/mixprec/version.h"}  # written into the build tree by CMake
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(design: Path):
    """[(layer name, [path prefix, ...])] in table order, and the layers restricted to core."""
    text = design.read_text()
    section = text.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    layers = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not line.lstrip().startswith("|") or set(cells[0]) <= set("-: "):
            continue
        if cells[0] == "layer":
            continue
        paths = [p for p in re.findall(r"`([^`]+)`", cells[1]) if p.split("/")[0] in ROOTS]
        if paths:
            layers.append((cells[0], [p.rstrip("/") for p in paths]))
    core_only = set()
    m = re.search(r"\(([^()]*?)\s+depends?\s+on\s+core\s+alone\)", section)
    if m:
        core_only = {n.strip() for n in re.split(r",|\band\b", m.group(1)) if n.strip()}
    return layers, core_only


class Layers:
    def __init__(self, layers, core_only):
        self.order = {name: i for i, (name, _) in enumerate(layers)}
        self.core_only = core_only
        self.prefixes = []  # (prefix, layer); "include/mixprec/*.h" means the top-level headers
        for name, paths in layers:
            for p in paths:
                self.prefixes.append((p, name))
        self.core = layers[0][0]

    def of(self, rel: str):
        """The layer of a repository path, or None."""
        parts = rel.split("/")
        if parts[:2] == ["include", "mixprec"]:
            if len(parts) == 3:
                return self.core if ("include/mixprec/*.h", self.core) in self.prefixes else None
            rel = "src/" + "/".join(parts[2:])  # include/mixprec/<folder>/ mirrors src/<folder>/
        best = None
        for prefix, name in self.prefixes:
            if "*" in prefix:
                continue
            if rel == prefix or rel.startswith(prefix + "/"):
                if best is None or len(prefix) > len(best[0]):
                    best = (prefix, name)
        return best[1] if best else None

    def allowed(self, src_layer: str, dst_layer: str) -> bool:
        if src_layer in self.core_only:
            return dst_layer in (self.core, src_layer)
        return self.order[dst_layer] <= self.order[src_layer]


def resolve(repo: Path, including: Path, target: str) -> str:
    """The repository path an include names: mixprec/... is include/mixprec/..., a path under
    src/ (the library's private include root), else relative to the including file."""
    if target.startswith("mixprec/"):
        return "include/" + target
    if (repo / "src" / target).exists() or (repo / "src" / target.split("/")[0]).is_dir():
        return "src/" + target
    return (including.parent / target).resolve().relative_to(repo.resolve()).as_posix()


def backend_of(rel: str, backends):
    parts = rel.split("/")
    if len(parts) >= 4 and parts[:2] == ["src", "ops"] and parts[2] in backends:
        return parts[2]
    return None


def check(repo: Path):
    layers = Layers(*read_layers(repo / "docs" / "design.md"))
    backends = {p.name for p in (repo / "src" / "ops").iterdir() if p.is_dir()}
    problems, files = [], 0
    for root in ROOTS:
        for f in sorted((repo / root).rglob("*")):
            if f.suffix not in (".h", ".cpp", ".in") or not f.is_file():
                continue
            rel = f.relative_to(repo).as_posix()
            if rel == UMBRELLA:
                continue  # above every layer: it includes each one's public API
            src_layer = layers.of(rel)
            if src_layer is None:
                problems.append(f"{rel}: its folder is in no layer of docs/design.md's Architecture table")
                continue
            files += 1
            text = f.read_text(errors="replace")
            for m in INCLUDE_RE.finditer(text):
                target = m.group(1)
                line = text.count("\n", 0, m.start()) + 1
                dst = resolve(repo, f, target)
                first = target.split("/")[0]
                ours = target.startswith("mixprec/") or (
                    "/" in target and not first.startswith(".") and (repo / "src" / first).is_dir())
                if ours and dst not in GENERATED and not (repo / dst).is_file():
                    problems.append(f'{rel}:{line}: #include "{target}": no such header ({dst})')
                    continue
                dst_layer = layers.of(dst)
                if dst_layer is None:
                    continue  # not ours (a system or third-party header spelled with quotes)
                if not layers.allowed(src_layer, dst_layer):
                    problems.append(f'{rel}:{line}: #include "{target}": {src_layer} may not use '
                                    f"{dst_layer} (docs/design.md, Architecture)")
                b_src, b_dst = backend_of(rel, backends), backend_of(dst, backends)
                if b_dst and b_src != b_dst:
                    who = f"backend {b_src}" if b_src else "an op or plumbing file"
                    problems.append(f'{rel}:{line}: #include "{target}": {who} may not use backend '
                                    f"{b_dst}'s kernels; go through dispatch (docs/design.md, The ops kit)")
    return problems, files


def self_test(repo: Path):
    """The checker itself finds what it must: an upward include, an include of another backend,
    a data file using ops, in a scratch tree laid out by the real design.md."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        t = Path(d)
        (t / "docs").mkdir()
        (t / "docs" / "design.md").write_text((repo / "docs" / "design.md").read_text())
        files = {
            "include/mixprec/tensor.h": "",
            "include/mixprec/ops/ops.h": '#include "mixprec/tensor.h"\n',
            "include/mixprec/amp/amp.h": '#include "mixprec/ops/ops.h"\n',
            "src/ops/registry.cpp": '#include "mixprec/amp/amp.h"\n',  # ops -> amp: upward
            "src/ops/ref/kernels.h": "",
            "src/ops/cpu/conv.cpp": '#include "ops/ref/kernels.h"\n',  # another backend
            "src/data/idx.cpp": '#include "mixprec/ops/ops.h"\n',  # data uses core alone
            "src/ops/conv.cpp": '#include "mixprec/graph.h"\n',  # a header that is gone
        }
        for rel, text in files.items():
            (t / rel).parent.mkdir(parents=True, exist_ok=True)
            (t / rel).write_text(text)
        found, _ = check(t)
        want = ["src/data/idx.cpp:1", "src/ops/conv.cpp:1", "src/ops/cpu/conv.cpp:1",
                "src/ops/registry.cpp:1"]
        got = sorted(p.split(": ")[0] for p in found)
        if got != want:
            print("include_layers: self-test failed: expected violations at", want, "got:", *found, sep="\n  ")
            return False
    return True


def main():
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    if not self_test(repo):
        return 1
    problems, files = check(repo)
    for p in problems:
        print(p)
    if problems:
        print(f"include_layers: {len(problems)} include(s) against the layer order or naming no header")
        return 1
    if files < 100:
        print(f"include_layers: only {files} files checked; is {repo} the repository?")
        return 1
    print(f"include_layers: {files} files, every include points up the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
