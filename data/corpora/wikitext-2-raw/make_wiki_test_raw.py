#!/usr/bin/env python3
"""Rebuilds WikiText-2 raw test in its original line layout (run once; the
output is shipped as data/corpora/wikitext-2-raw/wiki.test.raw).

The only raw copy at hand is the Hugging Face rows joined with CRLF and the
empty rows dropped. The tokenised release (wiki.test.tokens, same articles,
rare words replaced by <unk>) has the original layout: every blank line of
the raw file is a line holding one space there too. Walking the tokenised
file line by line and taking the next raw row for every non-blank line puts
the blank lines back. Each pair is checked (same words, except where the
tokenised line has <unk>) before anything is written.

usage: make_wiki_test_raw.py HF_ROWS.raw wiki.test.tokens OUT
"""
import sys


def main(rows_path, tokens_path, out_path):
    with open(rows_path, encoding="utf-8", newline="") as f:
        rows = [r for r in f.read().split("\r\n") if r != ""]
    with open(tokens_path, encoding="utf-8", newline="") as f:
        layout = f.read().split("\n")
    out, k, mismatched = [], 0, 0
    for line in layout:
        if line.strip() == "":
            out.append(line)
            continue
        row = rows[k]
        k += 1
        a, b = row.split(" "), line.split(" ")
        if len(a) != len(b) or any(x != y and y != "<unk>" for x, y in zip(a, b)):
            mismatched += 1  # raw rows with doubled spaces split differently
        out.append(row)
    if k != len(rows):
        sys.exit(f"{rows_path}: {len(rows)} rows, the layout has {k} text lines")
    if mismatched > 2:
        sys.exit(f"{mismatched} rows do not match their tokenised line")
    with open(out_path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
