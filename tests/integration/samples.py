#!/usr/bin/env python3
# samples.py FILE G SAMPLES: ddp-train --sample-log FILE's FILE.RANK files hold every
# sample of each epoch exactly once (the whole steps: SAMPLES // G * G of them).
# SPDX-License-Identifier: Apache-2.0
import sys, glob, collections
# lines "epoch step world sample" from FILE.RANK; a step redone after a recovery
# appears again with a smaller world: the smallest world's lines are the step's
steps = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + '.*'):
    for line in open(f):
        e, s, w, x = map(int, line.split())
        steps[(e, s)].append((w, x))
G, total = int(sys.argv[2]), int(sys.argv[3])
by_epoch = collections.defaultdict(list)
for (e, s), rows in steps.items():
    w = min(r[0] for r in rows)
    by_epoch[e] += [x for ww, x in rows if ww == w]
bad = 0
for e, xs in sorted(by_epoch.items()):
    dup = [x for x, n in collections.Counter(xs).items() if n > 1]
    want = total // G * G
    print(f"epoch {e}: {len(xs)} samples, {len(set(xs))} distinct, want {want}; duplicates {dup[:5]}")
    bad += len(dup) > 0 or len(xs) != want
sys.exit(1 if bad else 0)
