# SPDX-License-Identifier: Apache-2.0
# The source tree's shape, from the build itself (tests/integration/structure.test):
#   multi SRC OBJECTS   a source compiled into more than one object (target)
#   cycle DIR FILES     .c files of one folder that call each other in a loop
# Objects come from the generated Makefile's am_*_OBJECTS lists, so stale
# files in the build tree do not count; calls from nm of those objects.
import os, re, subprocess, sys

top, build = sys.argv[1], sys.argv[2]
text = open(os.path.join(build, 'Makefile')).read().replace('\\\n', ' ')
defs = {}
for line in text.splitlines():
    line = re.sub(r'@[A-Za-z0-9_]+@', '', line)
    m = re.match(r'(am__objects_\d+|am_\w+_OBJECTS)\s*=(.*)', line)
    if m:
        defs.setdefault(m.group(1), []).extend(m.group(2).split())

def expand(words, seen=()):
    out = []
    for w in words:
        m = re.fullmatch(r'\$\((am__objects_\d+)\)', w)
        if m and m.group(1) not in seen:
            out += expand(defs.get(m.group(1), []), seen + (m.group(1),))
        elif not w.startswith('$'):
            out.append(w.replace('$(OBJEXT)', 'o'))
    return out

def source_of(obj):
    d, name = os.path.split(obj)
    stem = name.rsplit('.', 1)[0]
    if os.path.exists(os.path.join(top, d, stem + '.c')):
        return os.path.join(d, stem + '.c')
    if '-' in stem and os.path.exists(os.path.join(top, d, stem.split('-', 1)[1] + '.c')):
        return os.path.join(d, stem.split('-', 1)[1] + '.c')
    return None

objects = {}
for var, words in defs.items():
    if var.startswith('am_'):
        for o in expand(words):
            src = source_of(o)
            if src:
                objects.setdefault(src, set()).add(o)
status = 0
for src in sorted(objects):
    if len(objects[src]) > 1:
        print('multi', src, ' '.join(sorted(objects[src])))
        status = 1

def object_file(o):
    if o.endswith('.lo'):
        d, n = os.path.split(o)
        return os.path.join(build, d, '.libs', n[:-3] + '.o')
    return os.path.join(build, o)

def symbols(path):
    d, u = set(), set()
    for line in subprocess.run(['nm', path], capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in 'Uw':
            u.add(parts[1])
        elif len(parts) == 3 and parts[1] in 'TDBRV':
            d.add(parts[2])
    return d, u

for folder in sys.argv[3:]:
    srcs = sorted(s for s in objects if os.path.dirname(s) == folder)
    syms = {s: symbols(object_file(sorted(objects[s])[0])) for s in srcs
            if os.path.exists(object_file(sorted(objects[s])[0]))}
    owner = {x: s for s, (d, _) in syms.items() for x in d}
    edges = {s: sorted({owner[x] for x in u if owner.get(x, s) != s}) for s, (_, u) in syms.items()}
    index, low, stack, on, n = {}, {}, [], set(), [0]
    def visit(v):
        global status
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                print('cycle', folder, ' '.join(os.path.basename(c) for c in sorted(comp)), '|',
                      '; '.join('%s->%s' % (os.path.basename(a), ','.join(os.path.basename(b)
                                for b in edges[a] if b in comp)) for a in sorted(comp)))
                status = 1
    for v in sorted(edges):
        if v not in index:
            visit(v)
sys.exit(status)
