"""Keyed BLAKE3 of a device array's bytes, computed on the GPU (SPEC.md section 5, property 3).

A subject worker commits to every call's outputs with a keyed digest before the measuring
process draws which calls it reveals (:mod:`perfledger.kernels.isolation.isolated`). Copying each output to
the host and hashing it there costs about 0.1-0.2 ns per byte; a memory-bound kernel moves its
bytes some 50 times faster, so that copy would dominate every comparison. This module computes
the same keyed BLAKE3 (the standard algorithm: 1 KiB chunks, one GPU thread per chunk, then one
thread per parent node, level by level, the last levels in one block; the tree BLAKE3 defines
is left-complete, which pairing adjacent nodes from the left and carrying an odd last node up
gives) on the device, so the
measuring process can check a revealed output with the ``blake3`` package.

:data:`BLAKE3_SOURCE` compiles with NVRTC (CuPy); with ``-DPERFLEDGER_CPU`` it is plain C whose
``b3_cpu`` runs the same device functions on the host (tests compare it with the ``blake3``
package where a C compiler exists). :func:`self_test` checks the device result against the
``blake3`` package; a worker whose device digest disagrees hashes on the host instead.
"""

from __future__ import annotations

import struct
from typing import Any

import blake3
import numpy as np

#: CUDA C (and, with ``-DPERFLEDGER_CPU``, host C) of keyed BLAKE3 over a byte buffer.
BLAKE3_SOURCE = r"""
#ifdef PERFLEDGER_CPU
#define __device__ static inline
#define __forceinline__
#endif
/* names of our own: no clash with whatever a compiler predefines */
typedef unsigned int b3_u32;
typedef unsigned char b3_u8;
typedef unsigned long long b3_u64;

#define B3_CHUNK_START 1u
#define B3_CHUNK_END 2u
#define B3_PARENT 4u
#define B3_ROOT 8u
#define B3_KEYED 16u

__device__ __forceinline__ b3_u32 b3_rotr(b3_u32 x, int n) {
    return (x >> n) | (x << (32 - n));
}

#define B3_G(a, b, c, d, x, y)                 \
    a = a + b + x; d = b3_rotr(d ^ a, 16);     \
    c = c + d;     b = b3_rotr(b ^ c, 12);     \
    a = a + b + y; d = b3_rotr(d ^ a, 8);      \
    c = c + d;     b = b3_rotr(b ^ c, 7);

/* BLAKE3's compression function; out gets the 8-word chaining value. */
__device__ void b3_compress(const b3_u32 cv[8], const b3_u32 block[16], b3_u64 counter,
                            b3_u32 block_len, b3_u32 flags, b3_u32 out[8]) {
    const b3_u8 perm[16] = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};
    b3_u32 v[16] = {cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7],
                      0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
                      (b3_u32)counter, (b3_u32)(counter >> 32), block_len, flags};
    b3_u32 m[16], t[16];
    for (int i = 0; i < 16; ++i) m[i] = block[i];
    for (int r = 0; r < 7; ++r) {
        B3_G(v[0], v[4], v[8], v[12], m[0], m[1]);
        B3_G(v[1], v[5], v[9], v[13], m[2], m[3]);
        B3_G(v[2], v[6], v[10], v[14], m[4], m[5]);
        B3_G(v[3], v[7], v[11], v[15], m[6], m[7]);
        B3_G(v[0], v[5], v[10], v[15], m[8], m[9]);
        B3_G(v[1], v[6], v[11], v[12], m[10], m[11]);
        B3_G(v[2], v[7], v[8], v[13], m[12], m[13]);
        B3_G(v[3], v[4], v[9], v[14], m[14], m[15]);
        for (int i = 0; i < 16; ++i) t[i] = m[perm[i]];
        for (int i = 0; i < 16; ++i) m[i] = t[i];
    }
    for (int i = 0; i < 8; ++i) out[i] = v[i] ^ v[i + 8];
}

/* The chaining value of chunk c (1024 bytes, the last one shorter) of data[0, nbytes). */
__device__ void b3_chunk(const b3_u8* data, long long nbytes, const b3_u32 key[8],
                         long long c, int root, b3_u32 out[8]) {
    long long start = c * 1024;
    long long len = nbytes - start;
    if (len > 1024) len = 1024;
    int blocks = len > 0 ? (int)((len + 63) / 64) : 1;
    b3_u32 cv[8], block[16];
    for (int i = 0; i < 8; ++i) cv[i] = key[i];
    for (int b = 0; b < blocks; ++b) {
        long long off = start + 64LL * b;
        long long n = len - 64LL * b;
        if (n > 64) n = 64;
        if (n < 0) n = 0;
        if (n == 64) {  /* a full block: word loads (offsets are multiples of 64, buffers of 4) */
            const b3_u32* words = (const b3_u32*)(data + off);
            for (int w = 0; w < 16; ++w) block[w] = words[w];  /* little-endian, as BLAKE3 */
        } else {
            for (int w = 0; w < 16; ++w) {
                b3_u32 word = 0;
                for (int k = 0; k < 4; ++k) {
                    long long i = 4LL * w + k;
                    if (i < n) word |= ((b3_u32)data[off + i]) << (8 * k);
                }
                block[w] = word;
            }
        }
        b3_u32 flags = B3_KEYED;
        if (b == 0) flags |= B3_CHUNK_START;
        if (b == blocks - 1) flags |= B3_CHUNK_END | (root ? B3_ROOT : 0u);
        b3_compress(cv, block, (b3_u64)c, (b3_u32)n, flags, cv);
    }
    for (int i = 0; i < 8; ++i) out[i] = cv[i];
}

/* The chaining value of a parent node of two chaining values. */
__device__ void b3_parent(const b3_u32* left, const b3_u32* right, const b3_u32 key[8],
                          int root, b3_u32 out[8]) {
    b3_u32 block[16];
    for (int i = 0; i < 8; ++i) { block[i] = left[i]; block[i + 8] = right[i]; }
    b3_compress(key, block, 0, 64, B3_KEYED | B3_PARENT | (root ? B3_ROOT : 0u), out);
}

#ifndef PERFLEDGER_CPU
extern "C" __global__ void b3_chunks(const b3_u8* data, long long nbytes, const b3_u32* key,
                                     b3_u32* cvs, long long nchunks, int root) {
    long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c < nchunks) b3_chunk(data, nbytes, key, c, root, cvs + 8 * c);
}

/* One level: node i of the next level is the parent of nodes 2i and 2i+1; an odd last node is
   carried up as it is. */
extern "C" __global__ void b3_parents(const b3_u32* in, long long n, b3_u32* out,
                                      const b3_u32* key, int root) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i + 1 < n) {
        b3_parent(in + 16 * i, in + 16 * i + 8, key, root, out + 8 * i);
    } else if (2 * i + 1 == n) {
        for (int k = 0; k < 8; ++k) out[8 * i + k] = in[16 * i + k];
    }
}
/* The levels from n nodes (n <= one block's reach) to the root in one block of threads,
   alternating between the two buffers a and b; the root's 8 words go to out. */
extern "C" __global__ void b3_tail(b3_u32* a, b3_u32* b, long long n, const b3_u32* key,
                                   b3_u32* out) {
    b3_u32* src = a;
    b3_u32* dst = b;
    while (n > 1) {
        long long m = (n + 1) / 2;
        for (long long i = threadIdx.x; i < m; i += blockDim.x) {
            if (2 * i + 1 < n) {
                b3_parent(src + 16 * i, src + 16 * i + 8, key, n == 2, dst + 8 * i);
            } else {
                for (int k = 0; k < 8; ++k) dst[8 * i + k] = src[16 * i + k];
            }
        }
        __syncthreads();  /* the level is complete before the next reads it */
        b3_u32* t = src; src = dst; dst = t;
        n = m;
    }
    if (threadIdx.x < 8) out[threadIdx.x] = src[threadIdx.x];
}
#else
#include <stdlib.h>
/* The same tree on the host, one node at a time (tests). */
void b3_cpu(const b3_u8* data, long long nbytes, const b3_u32* key, b3_u32* out) {
    long long n = nbytes > 0 ? (nbytes + 1023) / 1024 : 1;
    b3_u32* cvs = (b3_u32*)malloc(sizeof(b3_u32) * 8 * n);
    for (long long c = 0; c < n; ++c) b3_chunk(data, nbytes, key, c, n == 1, cvs + 8 * c);
    while (n > 1) {
        long long m = (n + 1) / 2;
        for (long long i = 0; i < m; ++i) {
            if (2 * i + 1 < n) b3_parent(cvs + 16 * i, cvs + 16 * i + 8, key, n == 2, cvs + 8 * i);
            else for (int k = 0; k < 8; ++k) cvs[8 * i + k] = cvs[16 * i + k];
        }
        n = m;
    }
    for (int k = 0; k < 8; ++k) out[k] = cvs[k];
    free(cvs);
}
#endif
"""

_kernels: dict[str, Any] = {}


def _kernel(name: str) -> Any:
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    if not _kernels:
        module = cupy.RawModule(code=BLAKE3_SOURCE, options=("-std=c++17",))
        _kernels.update(
            b3_chunks=module.get_function("b3_chunks"),
            b3_parents=module.get_function("b3_parents"),
            b3_tail=module.get_function("b3_tail"),
        )
    return _kernels[name]


#: Levels of at most this many nodes are finished by one block (:func:`digest_into`): one
#: launch instead of one per level, each launch costing more than the level's work.
TAIL_NODES = 8192
_THREADS = 128
_TAIL_THREADS = 512


def key_words(key: bytes) -> np.ndarray:
    """The 32-byte key as BLAKE3's eight little-endian words. Raises: ValueError otherwise."""
    if len(key) != 32:
        raise ValueError("the key must be 32 bytes")
    return np.asarray(struct.unpack("<8I", key), dtype=np.uint32)


def digest_into(array: Any, key_device: Any, out: Any) -> None:
    """Enqueue the keyed BLAKE3 of a contiguous CuPy array's bytes on the current stream; its
    32 bytes land in ``out`` (a CuPy ``uint32`` array of 8 words, little-endian) when the stream
    reaches them. No synchronisation: a worker digests every call of a batch this way and reads
    all the digests with one copy (:mod:`perfledger.kernels.isolation.subject_worker`).

    Args:
        array: the data (C-contiguous, 4-byte aligned).
        key_device: the key's 8 words on the device (:func:`key_words`, copied to the device).
        out: where the 8 words of the digest go (device memory).
    Raises: ValueError for a non-contiguous array or one whose data is not 4-byte aligned.
    """
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    if not array.flags.c_contiguous:
        raise ValueError("the digest needs a C-contiguous array")
    if array.data.ptr % 4:  # full blocks are read as words (CuPy allocates 256-byte aligned)
        raise ValueError("the digest needs 4-byte aligned data")
    data = array.reshape(-1).view(cupy.uint8)
    nbytes = int(data.size)
    n = max(1, (nbytes + 1023) // 1024)
    cvs = cupy.empty(8 * n, dtype=cupy.uint32)
    _kernel("b3_chunks")(
        ((n + _THREADS - 1) // _THREADS,), (_THREADS,),
        (data, np.int64(nbytes), key_device, cvs, np.int64(n), np.int32(n == 1)),
    )  # fmt: skip
    while n > TAIL_NODES:  # large outputs: the lower levels across the whole device
        m = (n + 1) // 2
        nxt = cupy.empty(8 * m, dtype=cupy.uint32)
        _kernel("b3_parents")(
            ((m + _THREADS - 1) // _THREADS,), (_THREADS,),
            (cvs, np.int64(n), nxt, key_device, np.int32(n == 2)),
        )  # fmt: skip
        cvs, n = nxt, m
    scratch = cupy.empty(8 * ((n + 1) // 2), dtype=cupy.uint32)
    _kernel("b3_tail")((1,), (_TAIL_THREADS,), (cvs, scratch, np.int64(n), key_device, out))


def words_hex(words: Any) -> str:
    """The hex digest of 8 digest words (host array or sequence of ints)."""
    return struct.pack("<8I", *(int(w) for w in words)).hex()


def device_digest(array: Any, key: bytes) -> str:
    """Keyed BLAKE3 (hex, 32 bytes) of a contiguous CuPy array's bytes, computed on the current
    stream (:func:`digest_into`, then one copy back); equal to
    ``blake3.blake3(bytes, key=key).hexdigest()``.

    Raises: ValueError for a non-contiguous array, one whose data is not 4-byte aligned, or a
    key that is not 32 bytes.
    """
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    out = cupy.empty(8, dtype=cupy.uint32)
    digest_into(array, cupy.asarray(key_words(key)), out)
    return words_hex(out.get())


def self_test(key: bytes = bytes(range(32))) -> bool:
    """Whether :func:`device_digest` equals the ``blake3`` package on buffers of assorted sizes
    (empty, inside one block, one chunk, odd chunk counts, a partial last chunk)."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    rng = np.random.default_rng(7)
    sizes = (0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 3 * 1024 + 5, 5 * 1024, 70_001)
    # ... and across the hand-over from whole-device levels to the one-block tail
    tail = 1024 * TAIL_NODES
    for size in (*sizes, tail, tail + 1, 2 * tail + 3 * 1024 + 7):
        host = rng.integers(0, 256, size=size, dtype=np.uint8)
        want = blake3.blake3(host.tobytes(), key=key).hexdigest()
        if device_digest(cupy.asarray(host), key) != want:
            return False
    return True


__all__ = [
    "BLAKE3_SOURCE",
    "TAIL_NODES",
    "device_digest",
    "digest_into",
    "key_words",
    "self_test",
    "words_hex",
]
