#!/usr/bin/env python3
"""Rewrites rank_dnn lines (`click:L dense_feature:F x13 1:ID ... 26:ID`, what fleetps-datagen
writes and fleetps reads) as Paddle's MultiSlot lines for QueueDataset with pipe_command
"cat": for each variable in the program's use_var order (dense_input, C1..C26, label) the
count of its values, then the values. Paddle's C++ MultiSlotDataFeed then parses them with
no Python in the training loop, its fastest reader.
  to_multislot.py IN_FILE OUT_FILE
A line that does not have 13 dense values and one id for each of the 26 slots stops the
conversion with its file:line."""
import sys

SLOTS = 26
DENSE = 13


def convert(line, where):
    label, dense, ids = None, [], {}
    for tok in line.split():
        name, _, value = tok.partition(":")
        if name == "click":
            label = value
        elif name == "dense_feature":
            dense.append(value)
        else:
            ids.setdefault(int(name), []).append(value)
    if label is None or len(dense) != DENSE or sorted(ids) != list(range(1, SLOTS + 1)):
        sys.exit(f"{where}: not a rank_dnn line (click, {DENSE} dense_feature, ids of slots 1..{SLOTS})")
    parts = [str(DENSE)] + dense
    for s in range(1, SLOTS + 1):
        parts += [str(len(ids[s]))] + ids[s]
    parts += ["1", label]
    return " ".join(parts)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as fin, open(dst, "w") as fout:
        for n, line in enumerate(fin, 1):
            if line.strip():
                fout.write(convert(line, f"{src}:{n}") + "\n")


if __name__ == "__main__":
    main()
