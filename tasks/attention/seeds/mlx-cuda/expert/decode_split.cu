// attention, expert: decode (Tq == 1), pass 1 of 2. Block (split s, b * Hkv + kvh, head group) of NTD threads:
// keys [s CH, s CH + CH) of one KV head for up to GH of the query heads that share it (each K/V byte is read
// once per KV head, 16-byte loads); writes the split's partial (max, sum, unnormalised output) per query head.
// The device code is in attn.cuh. Template: D, NTD, CH, GH, U and the dims Hq, Hkv, Tk (compile-time constants).
ksattn::decode_split<T, D, NTD, CH, GH, U>(q, k, v, mpart, lpart, apart, Hq, Hkv, Tk);
