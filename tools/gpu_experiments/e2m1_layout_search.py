#!/usr/bin/env python3
"""Why the device layout's decode (src/cuda/mxfp4_layout.cuh) costs 17 instructions per 8 weights.

A weight decodes to a float as 2^-126 times its E2M1 value when its magnitude bits (m, e0, e1) sit
at float bits 22-24 and its sign at bit 31, every other bit zero. A code whose magnitude sits at
bits p..p+2 of the word and its sign at p+9 needs one shift and one mask (the code at p = 22 only
the mask). This searches every placement of such codes in a 32-bit word, and then every way of
laying out the two codes left over so that one shared mask and one multiply and one mask each
decode them (5 instructions for the pair; today 6), which would give 16.

    python3 tools/gpu_experiments/e2m1_layout_search.py
"""
import itertools

SHAPE = (0, 1, 2, 9)  # magnitude bits, then the sign 9 above the lowest
FIELDS = 0x81C00000  # float bits 22-24 and 31
WORD = 0xFFFFFFFF


def placements(count):
    """Every set of `count` disjoint placements p (bits p + SHAPE inside the word)."""
    out = []

    def grow(used, ps, start):
        if len(ps) == count:
            out.append((tuple(ps), used))
            return
        for p in range(start, 32 - max(SHAPE)):
            bits = sum(1 << (p + s) for s in SHAPE)
            if not used & bits:
                grow(used | bits, ps + [p], p + 1)

    grow(0, [], 0)
    return out


def one_multiply_decodes(free, roles):
    """Whether ((w & free_mask) * C) & FIELDS is the code with bits `roles` (m, e0, e1, sign) for
    every value of the free bits, C moving each role's bit to its float bit."""
    targets = (22, 23, 24, 31)
    if any(t < b for b, t in zip(roles, targets)):
        return False  # a multiply only moves bits up
    c = 0
    for b, t in zip(roles, targets):
        c |= 1 << (t - b)
    mask = sum(1 << b for b in free)
    for v in range(1 << len(free)):
        w = sum(1 << b for i, b in enumerate(free) if v >> i & 1)
        want = sum((w >> b & 1) << t for b, t in zip(roles, targets))
        if ((w & mask) * c) & WORD & FIELDS != want:
            return False
    return True


def main():
    for count in (8, 7, 6):
        found = placements(count)
        print(f"{count} codes placed as magnitude + sign 9 above: {len(found)} layouts")
        if found:
            break
    pair_decodes = 0
    for ps, used in found:
        free = [b for b in range(32) if not used >> b & 1]
        for a in itertools.combinations(free, 4):
            b = [x for x in free if x not in a]
            ok_a = any(one_multiply_decodes(free, r) for r in itertools.permutations(a))
            ok_b = any(one_multiply_decodes(free, r) for r in itertools.permutations(b))
            pair_decodes += ok_a and ok_b
        print(f"  placements {ps}, bits left {free}: "
              f"{pair_decodes} ways to decode the other two codes in one multiply each")


if __name__ == "__main__":
    main()
