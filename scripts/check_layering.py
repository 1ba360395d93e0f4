#!/usr/bin/env python3
"""Checks that #include "..." lines in cpp/ and launcher/ respect the layering of the core.

    scripts/check_layering.py            one line per violation, exit 1 if there is any
    scripts/check_layering.py --list     the same lines, exit 0 (for tracking ongoing work)
    scripts/check_layering.py --root D   check the tree under D instead of this checkout

Output lines read `file:line: <layer> may not include <header> (<rule>)`.

An include is resolved as the compiler does with this project's include paths: first next to
the including file, then under cpp/, then under cpp/include/. A header that is found nowhere is
still classified when its first path component names a layer (so a new include of a header that
does not exist yet is checked too); anything else (generated or third-party) is ignored. Only
direct includes are checked. Standard library only, so CI can run it before anything is built.
"""

import argparse
import os
import re
import sys

# ---- the rules (data) ----------------------------------------------------------------------------

# Layers from the bottom up. A layer may include itself and the layers below it (rule
# "layer order"). 'transport/*' stands for every backend folder under cpp/transport/ (shm, tcp,
# local, and nccl to come); 'transport' is the generic headers directly in cpp/transport/.
# 'backends/*' likewise stands for every collective backend folder under cpp/backends/ (cpu,
# mpi, and cuda to come), above the engine, which names none of them (it reaches them through
# engine/backend.h); 'backends' is what they share, directly in cpp/backends/. 'mpi'
# is the MPI library reached through run-time plugins (bootstrap over MPI), used by the API.
# 'vocabulary' is the public headers every layer shares (error classes, data types) and 'public'
# the rest of cpp/include/horovod/ (the C++ and C API), which sits at the level of 'api'.
ORDER = ['vocabulary', 'common', 'store', 'elastic', 'transport', 'transport/*', 'mpi', 'collectives', 'engine',
         'backends', 'backends/*', 'autotune', 'timeline', ['api', 'public'], ['python', 'frameworks']]

# Public headers (under cpp/include/) that count as 'vocabulary'; the others are 'public'.
VOCABULARY_HEADERS = {'horovod/errors.h', 'horovod/types.h', 'horovod/operation.h'}

# Files allowed to include layers that the rules below would refuse, with the layers they may
# include. Keep this list short and say why for each entry.
FILE_EXCEPTIONS = {
    # The composite transport routes each peer to the backend that reaches it (shm on the same
    # host, tcp across hosts), so it is the one generic-transport file that may combine
    # backends. Today it needs none of their headers (it holds them as Transport objects
    # through transport/transport.h); the exception is for when it constructs them.
    'cpp/transport/composite.h': ['transport/*'],
    'cpp/transport/composite.cc': ['transport/*'],
}

# Backend pairs (includer, included) allowed to cross between sibling backends (transport or
# collective). Empty: no backend builds on another one today.
BACKEND_ALLOW = set()

# Each rule: (name, source layers it applies to, kind, layers). kind 'only' lists what the
# source may include (its own layer always included); 'forbid' lists what it may not. The first
# rule an include breaks is reported. 'layer order' (from ORDER) and 'sibling backends' (with
# BACKEND_ALLOW) are checked after these.
RULES = [
    # Installed headers: a C++ program compiles them with only cpp/include/ on its path.
    ('public headers are self-contained', ['vocabulary', 'public'], 'only',
     ['vocabulary', 'public']),
    # The binding is built on the public API: the default runtime in api/, the public headers and
    # common utilities; it never reaches into engine, collectives, transports or stores.
    ('the binding sees only the API', ['python'], 'only',
     ['api', 'public', 'vocabulary', 'common']),
    # Framework kernel libraries (cpp/frameworks/<framework>/) are loaded by a framework into a
    # process whose core lives in horovod._core: they reach it through horovod/api_table.h and
    # link no core code (also enforced at link time with --no-undefined).
    ('framework kernels see only the public headers', ['frameworks'], 'only',
     ['vocabulary', 'public']),
    # Algorithms, the engine and the API see transports through the Transport interface and the
    # registry only; which backend is used is the registry's business.
    ('no concrete transport backend above transport',
     ['collectives', 'engine', 'backends', 'backends/*', 'autotune', 'timeline', 'api'], 'forbid',
     ['transport/*']),
    # Collective backends register themselves (engine/backend.h); nothing above them picks one
    # by name.
    ('no concrete collective backend above backends', ['autotune', 'timeline', 'api'], 'forbid',
     ['backends/*']),
    # horovodrun links only common, store and elastic (see launcher/CMakeLists.txt).
    ('the launcher links only common, store and elastic', ['launcher'], 'only',
     ['common', 'store', 'elastic', 'vocabulary']),
]

LAYER_ORDER_RULE = 'layer order'
SIBLING_RULE = 'sibling backends'
SCANNED = ['cpp', 'launcher']
SOURCE_SUFFIXES = ('.h', '.hpp', '.cc', '.cpp', '.cu')
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

# ---- the check -----------------------------------------------------------------------------------


def _levels():
    levels = {}
    for i, entry in enumerate(ORDER):
        for name in (entry if isinstance(entry, list) else [entry]):
            levels[name] = i
    return levels


LEVELS = _levels()


def layer_of(rel):
    """The layer of a repository-relative path ('cpp/engine/runtime.h' -> 'engine'), a backend
    ('transport/shm'), or None for files outside the layers."""
    parts = rel.split('/')
    if parts[0] == 'launcher':
        return 'launcher'
    if parts[0] != 'cpp' or len(parts) < 3:
        return None
    if parts[1] == 'include':
        return 'vocabulary' if '/'.join(parts[2:]) in VOCABULARY_HEADERS else 'public'
    if parts[1] in ('transport', 'backends') and len(parts) >= 4:
        return parts[1] + '/' + parts[2]
    if parts[1] in LEVELS:
        return parts[1]
    return None


def _generic(layer):
    """'transport/shm' -> 'transport/*', 'backends/cpu' -> 'backends/*' (how rules name backends)."""
    if layer is not None and '/' in layer:
        return layer.split('/')[0] + '/*'
    return layer


def resolve(root, including, header):
    """Repository-relative path that `#include "header"` in `including` refers to, or None."""
    candidates = [os.path.join(os.path.dirname(including), header), os.path.join('cpp', header),
                  os.path.join('cpp', 'include', header)]
    for candidate in candidates:
        candidate = os.path.normpath(candidate)
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    first = header.split('/')[0]
    if first == 'horovod':
        return os.path.join('cpp', 'include', header)
    if '/' in header and first in LEVELS:
        return os.path.join('cpp', header)
    return None


def broken_rule(src_file, src, dst):
    """The name of the rule that an include from layer `src` (in src_file) of layer `dst` breaks,
    or None."""
    if src == dst:
        return None
    gsrc, gdst = _generic(src), _generic(dst)
    if gdst in FILE_EXCEPTIONS.get(src_file, ()):
        return None
    for name, sources, kind, layers in RULES:
        if gsrc not in sources:
            continue
        if kind == 'only' and gdst not in layers:
            return name
        if kind == 'forbid' and gdst in layers:
            return name
    if gsrc == gdst and gsrc in ('transport/*', 'backends/*'):
        return None if (src, dst) in BACKEND_ALLOW else SIBLING_RULE
    if gsrc in LEVELS and gdst in LEVELS and LEVELS[gdst] > LEVELS[gsrc]:
        return LAYER_ORDER_RULE
    return None


def source_files(root):
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for filename in sorted(filenames):
                if filename.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, filename), root)


def violations(root):
    """[(file, line, layer, header, rule)] for the tree under root."""
    found = []
    for rel in source_files(root):
        src = layer_of(rel)
        if src is None:
            continue
        with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
            for number, text in enumerate(f, 1):
                match = INCLUDE.match(text)
                if not match:
                    continue
                header = match.group(1)
                target = resolve(root, rel, header)
                dst = layer_of(target) if target is not None else None
                if dst is None:
                    continue
                rule = broken_rule(rel, src, dst)
                if rule is not None:
                    found.append((rel, number, src, header, rule))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--list', action='store_true',
                        help='print the current violations and exit 0')
    parser.add_argument('--root', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help='repository root to check (default: this checkout)')
    args = parser.parse_args(argv)
    found = violations(args.root)
    for rel, number, layer, header, rule in found:
        print('{}:{}: {} may not include {} ({})'.format(rel, number, layer, header, rule))
    if args.list:
        print('{} violation(s)'.format(len(found)), file=sys.stderr)
        return 0
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
