/*
 * nccl_hash.h - the communicator hash exactly as NCCL 2.26 .. 2.30 compute it
 * (src/include/bitops.h: eatHash / digestHash / getHash), used by the
 * simulated libnccl for comm->commHash and by the workload to print the value
 * it expects, independently of the library.
 *
 *   InitRank / InitRankConfig / InitAll: getHash(id, 128)
 *   InitRankScalable:                    getHash(commIds[0], 128)
 *   CommSplit (and CommShrink):          acc = {1, 1}; eat(parent commHash, 8 bytes);
 *                                        eat(splitCount, 4 bytes, int); eat(color, 4 bytes);
 *                                        digest(acc)
 *
 * NCCL prints the same value as "commId 0x%llx" in its Init START/COMPLETE
 * INFO lines (InitRank* only; split communicators log their parent instead).
 * Older releases differ; see /work/notes/nccl.md.
 */
#ifndef GPUTRACE_NCCL_HASH_H
#define GPUTRACE_NCCL_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The hash depends on how the input is cut into eatHash() calls, not only on
 * the bytes: each call first mixes in its size. */
static inline void sim_eat_hash(uint64_t acc[2], const void *bytes, size_t size)
{
    const unsigned char *ptr = (const unsigned char *)bytes;
    acc[0] ^= size;
    while (size != 0) {
        acc[0] += acc[1];
        acc[1] ^= acc[0];
        acc[0] ^= acc[0] >> 31;
        acc[0] *= 0x9de62bbc8cef3ce3ULL;
        acc[1] ^= acc[1] >> 32;
        acc[1] *= 0x485cd6311b599e79ULL;
        size_t chunk = size < sizeof(uint64_t) ? size : sizeof(uint64_t);
        uint64_t x = 0;
        memcpy(&x, ptr, chunk); /* little-endian load, zero-padded */
        ptr += chunk;
        size -= chunk;
        acc[0] += x;
    }
}

static inline uint64_t sim_digest_hash(const uint64_t acc[2])
{
    uint64_t h = acc[0];
    h ^= h >> 31;
    h *= 0xbac3bd562846de6bULL;
    h += acc[1];
    h ^= h >> 32;
    h *= 0x995a187a14e7b445ULL;
    return h;
}

static inline uint64_t sim_get_hash(const void *bytes, size_t size)
{
    uint64_t acc[2] = { 1, 1 };
    sim_eat_hash(acc, bytes, size);
    return sim_digest_hash(acc);
}

/* commHash of the communicator that ncclCommSplit(parent, color, ...) makes
 * the splitCount-th time it is called on parent (1 for the first split). */
static inline uint64_t sim_split_hash(uint64_t parent_hash, int split_count, int color)
{
    uint64_t acc[2] = { 1, 1 };
    sim_eat_hash(acc, &parent_hash, sizeof(parent_hash));
    sim_eat_hash(acc, &split_count, sizeof(split_count));
    sim_eat_hash(acc, &color, sizeof(color));
    return sim_digest_hash(acc);
}

#endif /* GPUTRACE_NCCL_HASH_H */
