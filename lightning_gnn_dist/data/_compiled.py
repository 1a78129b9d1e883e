"""The numba kernels of :mod:`lightning_gnn_dist.data._kernels` (imported on first use only).

They are module-level functions so that numba's on-disk cache finds them again in the next
process. Defined inside a function, as closures over each other, they were cached under a key
that hashes the pickled closure cells (the helper dispatchers), which differ in every process:
every process compiled the sampler again (~2–4 s) and added one more cache entry.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def lowbias32(x):
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


@numba.njit(cache=True, inline="always")
def fold(v):
    return (v ^ (((v >> 32) * 0x9E3779B1) & 0xFFFFFFFF)) & 0xFFFFFFFF


@numba.njit(cache=True, nogil=True)
def sample(colptr, src, src_key, dst_key, start, targets, stream, fanout, sparse, extra):
    # `extra`: a second per-edge array (or empty) gathered at the same chosen in-edges.
    gather = extra.shape[0] > 0
    num_targets = targets.shape[0]
    counts = np.empty(num_targets, np.int64)
    total = 0
    for t in range(num_targets):
        local = targets[t] - start
        degree = colptr[local + 1] - colptr[local]
        counts[t] = degree if degree < fanout else fanout
        total += counts[t]
    out = np.empty(total, np.int64)
    out_extra = np.empty(total if gather else 0, np.int64)
    offsets = np.empty(2 * fanout, np.int64)
    position = 0
    for t in range(num_targets):
        local = targets[t] - start
        first = colptr[local]
        degree = colptr[local + 1] - first
        if degree <= fanout:  # every in-edge
            for e in range(degree):
                out[position + e] = src[first + e]
                if gather:
                    out_extra[position + e] = extra[first + e]
            position += degree
            continue
        base = lowbias32(lowbias32(np.int64(0x9E3779B9) ^ fold(stream[t])) ^ fold(dst_key[local]))
        found = 0
        if degree > sparse * fanout:  # the first `fanout` distinct of 2·fanout draws
            for draw in range(2 * fanout):
                u = lowbias32(base ^ fold(np.int64(draw))) / 4294967296.0
                offset = np.int64(u * degree)
                seen = False
                for j in range(found):
                    if offsets[j] == offset:
                        seen = True
                        break
                if not seen:
                    offsets[found] = offset
                    found += 1
                    if found == fanout:
                        break
            if found == fanout:
                for j in range(fanout):
                    out[position + j] = src[first + offsets[j]]
                    if gather:
                        out_extra[position + j] = extra[first + offsets[j]]
                position += fanout
                continue
        keys = np.empty(degree, np.int64)  # the `fanout` smallest keys, ascending
        for e in range(degree):
            keys[e] = lowbias32(base ^ fold(src_key[first + e]))
        order = np.argsort(keys, kind="mergesort")
        for j in range(fanout):
            out[position + j] = src[first + order[j]]
            if gather:
                out_extra[position + j] = extra[first + order[j]]
        position += fanout
    return counts, out, out_extra


@numba.njit(cache=True, nogil=True)
def relabel(table, src, num_local):
    # New ids (not in the table yet) in ascending order, then every source's local index.
    new = np.empty(src.shape[0], np.int64)
    count = 0
    for e in range(src.shape[0]):
        v = src[e]
        if table[v] == -1:
            table[v] = -2
            new[count] = v
            count += 1
    new = np.sort(new[:count])
    for k in range(count):
        table[new[k]] = num_local + k
    local = np.empty(src.shape[0], np.int64)
    for e in range(src.shape[0]):
        local[e] = table[src[e]]
    return new, local


@numba.njit(cache=True, nogil=True)
def counting_order(keys, num_keys):
    num = keys.shape[0]
    offsets = np.zeros(num_keys + 1, np.int64)
    for k in range(num):
        offsets[keys[k] + 1] += 1
    for i in range(num_keys):
        offsets[i + 1] += offsets[i]
    fill = offsets[:-1].copy()
    order = np.empty(num, np.int64)
    for k in range(num):
        key = keys[k]
        order[fill[key]] = k
        fill[key] += 1
    return offsets, order
