#!/usr/bin/python3
"""Check the relative links of the project's Markdown files: every target exists, and every
#anchor names a heading of its file (GitHub's rule: lower case, punctuation dropped,
spaces to hyphens, -1, -2, ... for repeats). Prints each broken link as FILE:LINE: TARGET
(reason) and exits 1 if there is one.

  scripts/check_links.py [FILE.md ...]     (default: every Markdown file git knows of)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')


def slugs(path):
    found, seen, fenced = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fenced = not fenced
        if fenced or not line.startswith('#'):
            continue
        text = re.sub(r'^#+\s*', '', line.strip())
        text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)
        slug = re.sub(r'[^\w\- ]', '', text.lower()).replace(' ', '-')
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f'{slug}-{n}')
    return found


def main():
    files = sys.argv[1:] or subprocess.run(
        ['git', 'ls-files', '--cached', '--others', '--exclude-standard', '*.md'],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    bad = 0
    for name in files:
        path = os.path.join(ROOT, name)
        fenced = False
        for number, line in enumerate(open(path, encoding='utf-8'), 1):
            if line.startswith('```'):
                fenced = not fenced
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r'[a-z]+:', target):
                    continue
                file, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
                reason = None
                if not os.path.exists(dest):
                    reason = 'no such file'
                elif anchor and dest.endswith('.md') and anchor not in slugs(dest):
                    reason = 'no such heading'
                if reason:
                    print(f'{name}:{number}: {target} ({reason})')
                    bad += 1
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
