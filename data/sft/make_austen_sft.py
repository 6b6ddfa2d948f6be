#!/usr/bin/env python3
"""Builds the shipped SFT set (data/sft/austen_sft_{train,val}.jsonl) from the
six Jane Austen novels in data/corpora/janeausten. Run once from the repository
root; the output is committed, so nothing needs Python at run time.

Two kinds of instruction, both answered from the real text:
  * "Which Jane Austen novel is this passage from?" + a paragraph -> the title.
  * "Continue this passage from <title>:" + the first sentences of a paragraph
    -> its next sentence.
Paragraphs are the blank-line separated blocks of 200-700 characters that
start past the title pages; each novel's paragraphs are split 95/5 into
train/val by a seeded shuffle, so no paragraph appears in both, and at most
250 training and 20 validation paragraphs are taken per novel (to keep the
files small).
"""
import json
import random
import re
from pathlib import Path

TITLES = {
    "emma.txt": "Emma",
    "mansfieldpark.txt": "Mansfield Park",
    "northangerabbey.txt": "Northanger Abbey",
    "persuasion.txt": "Persuasion",
    "prideprejudice.txt": "Pride and Prejudice",
    "sensesensibility.txt": "Sense and Sensibility",
}
SENTENCE_END = re.compile(r'(?<=[.!?])(?:["\u201d\u2019\']?)\s+(?=[A-Z"\u201c])')


def paragraphs(text):
    for block in re.split(r"\n\s*\n", text):
        p = " ".join(block.split())
        if 200 <= len(p) <= 700 and not p.isupper() and "CHAPTER" not in p:
            yield p


ABBREVIATIONS = ("Mr.", "Mrs.", "Dr.", "St.", "Col.", "Capt.", "Esq.", "Messrs.")


def sentences(p):
    parts, out = [s.strip() for s in SENTENCE_END.split(p) if s.strip()], []
    for s in parts:  # re-join splits made after a title such as "Mr."
        if out and out[-1].endswith(ABBREVIATIONS):
            out[-1] += " " + s
        else:
            out.append(s)
    return out


def examples(title, p, rng):
    out = [{"prompt": "Which Jane Austen novel is this passage from?\n\n" + p,
            "response": title + "."}]
    s = sentences(p)
    if len(s) >= 2:
        k = rng.randint(1, min(3, len(s) - 1))
        out.append({"prompt": f"Continue this passage from {title}:\n\n" + " ".join(s[:k]),
                    "response": s[k]})
    return out


def main():
    root = Path(__file__).resolve().parents[2]
    rng = random.Random(20261122)
    train, val = [], []
    for name, title in TITLES.items():
        paras = list(paragraphs((root / "data/corpora/janeausten" / name).read_text()))
        rng.shuffle(paras)
        cut = max(1, len(paras) // 20)
        for p in paras[:cut][:20]:
            val.extend(examples(title, p, rng))
        for p in paras[cut:][:250]:
            train.extend(examples(title, p, rng))
    rng.shuffle(train)
    rng.shuffle(val)
    for split, rows in (("train", train), ("val", val)):
        path = root / f"data/sft/austen_sft_{split}.jsonl"
        with path.open("w") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"{path.relative_to(root)}: {len(rows)} examples")


if __name__ == "__main__":
    main()
