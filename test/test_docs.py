"""Checks of the documentation: README.md stays within 20 KB (20480 bytes) and opens with a table
of contents that lists every one of its sections; every relative link of README.md and
docs/*.md names a file of the repository and, with #anchor, a heading of that file (GitHub's
anchor rules: the heading's text lowercased, punctuation dropped, spaces to '-', a repeated
heading suffixed -1, -2, ...); every docs/*.md starts with a title and a summary line and is
linked from README. The checker itself is first run on a small tree with one broken file link
and one broken anchor, which it must report. Plain text only, no packages; well under a second.

Prints "PASS name" / "FAIL name: detail" lines; exits 1 on any failure.

    python3 test/test_docs.py
"""
import os
import re
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
import testlib  # noqa: E402

README_MAX_BYTES = 20480
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) or ![alt](target), with an optional "title"; the target has no blanks
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
check = testlib.Checks()


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    inside = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield n, line


def code_spans(line):
    """[(start, end)] of the inline code spans of one line."""
    spans, i = [], 0
    while True:
        a = line.find("`", i)
        if a < 0:
            return spans
        run = len(line[a:]) - len(line[a:].lstrip("`"))
        b = line.find("`" * run, a + run)
        if b < 0:
            return spans
        spans.append((a, b + run))
        i = b + run


def slug(heading):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def headings(text):
    """[(level, text)] of the ATX headings outside code blocks."""
    return [(len(m.group(1)), m.group(2)) for _, l in prose_lines(text) for m in [HEADING.match(l)] if m]


def anchors(text):
    """The set of a file's heading anchors, repeated headings numbered as GitHub numbers them."""
    seen, out = {}, set()
    for _, h in headings(text):
        s = slug(h)
        k = seen.get(s, 0)
        out.add(s if k == 0 else f"{s}-{k}")
        seen[s] = k + 1
    return out


def links(text):
    """[(line number, target)] of the inline links outside code."""
    out = []
    for n, line in prose_lines(text):
        spans = code_spans(line)
        for m in LINK.finditer(line):
            if not any(a <= m.start() < b for a, b in spans):
                out.append((n, m.group(2)))
    return out


def broken_links(path, root):
    """['file:line: target: why'] for every relative link of a Markdown file that does not resolve."""
    text = open(path, encoding="utf-8").read()
    problems, cache = [], {}
    rel = os.path.relpath(path, root)
    for n, target in links(text):
        if SCHEME.match(target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        if file_part.startswith("/"):
            dest = os.path.normpath(os.path.join(root, file_part.lstrip("/")))
        elif file_part:
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        else:
            dest = path
        where = f"{rel}:{n}: ({target})"
        if os.path.relpath(dest, root).startswith(".."):
            problems.append(f"{where}: outside the repository")
            continue
        if not os.path.exists(dest):
            problems.append(f"{where}: no file {os.path.relpath(dest, root)}")
            continue
        if anchor:
            if not dest.endswith(".md") or os.path.isdir(dest):
                problems.append(f"{where}: an anchor into a file that is not Markdown")
                continue
            if dest not in cache:
                cache[dest] = anchors(open(dest, encoding="utf-8").read())
            if anchor not in cache[dest]:
                problems.append(f"{where}: no heading '#{anchor}' in {os.path.relpath(dest, root)}")
    return problems


def toc_problems(text):
    """What is wrong with README's table of contents: it must be a section named Contents (or Table
    of contents) before the second section, whose list links to every other '##' section."""
    lines = text.split("\n")
    sections = [h for lvl, h in headings(text) if lvl == 2]
    names = [s for s in sections if s.strip().lower() in ("contents", "table of contents")]
    if not names:
        return ["no '## Contents' section"]
    toc_at = sections.index(names[0])
    if toc_at > 1:
        return [f"'## {names[0]}' is section {toc_at + 1}; it belongs near the top"]
    start = next(i for i, l in enumerate(lines) if HEADING.match(l) and HEADING.match(l).group(2) == names[0])
    body = []
    for l in lines[start + 1:]:
        if HEADING.match(l):
            break
        body.append(l)
    listed = [t[1:] for _, t in links("\n".join(body)) if t.startswith("#")]
    own = anchors(text)
    problems = [f"'#{a}' names no heading of README" for a in listed if a not in own]
    wanted = [slug(s) for s in sections if s is not names[0]]
    problems += [f"section '#{a}' is not listed" for a in wanted if a not in listed]
    if not listed:
        problems.append("it links to no section")
    return problems


def self_test():
    """The checker on a small tree with one good link, one missing file and one missing anchor."""
    with tempfile.TemporaryDirectory(prefix="test_docs_") as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "docs", "a.md"), "w") as f:
            f.write("# A\n\n## Data parallel runs (MPI)\n\n## Data parallel runs (MPI)\n\n```\n## not a heading\n```\n")
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("# R\n\n## Contents\n\n- [One](#one)\n\n## One\n\nSee [a](docs/a.md#data-parallel-runs-mpi-1), "
                    "[gone](docs/b.md), [bad anchor](docs/a.md#not-a-heading), `[code](docs/c.md)`, "
                    "[web](https://example.com/x).\n\n## Two\n")
        found = broken_links(os.path.join(root, "README.md"), root)
        toc = toc_problems(open(os.path.join(root, "README.md")).read())
    ok = (len(found) == 2 and "no file docs/b.md" in found[0] and "no heading '#not-a-heading'" in found[1]
          and toc == ["section '#two' is not listed"])
    check("docs_checker_finds_broken_links", ok, f"links {found}, contents {toc}")


def main():
    self_test()
    readme = os.path.join(REPO, "README.md")
    size = os.path.getsize(readme)
    check("docs_readme_size", size <= README_MAX_BYTES, f"README.md is {size} bytes, more than {README_MAX_BYTES}")
    text = open(readme, encoding="utf-8").read()
    problems = toc_problems(text)
    check("docs_readme_contents", not problems, "; ".join(problems))
    docs_dir = os.path.join(REPO, "docs")
    docs = sorted(os.path.join(docs_dir, f) for f in os.listdir(docs_dir) if f.endswith(".md")) if os.path.isdir(docs_dir) else []
    check("docs_folder", len(docs) > 0, "no docs/*.md")
    for path in [readme] + docs:
        problems = broken_links(path, REPO)
        check("docs_links_" + os.path.relpath(path, REPO), not problems, "; ".join(problems))
    linked = {os.path.normpath(os.path.join(REPO, t.partition("#")[0])) for _, t in links(text) if not SCHEME.match(t)}
    unlinked = [os.path.relpath(p, REPO) for p in docs if p not in linked]
    check("docs_all_linked_from_readme", not unlinked, "README.md does not link to " + ", ".join(unlinked))
    bad = []
    for path in docs:
        first = open(path, encoding="utf-8").read().split("\n\n")
        if len(first) < 2 or not first[0].startswith("# ") or "\n" in first[0] or first[1].startswith("#"):
            bad.append(os.path.relpath(path, REPO))
    check("docs_title_and_summary", not bad, "no '# Title' line followed by a summary paragraph: " + ", ".join(bad))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
