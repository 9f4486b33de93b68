// attention, expert: decode (Tq == 1), pass 1 of 2: block (split, b * Hkv + kvh, head group) reduces keys
// [split CH, split CH + CH) of one KV head for up to GH of its query heads into its rows of `part`.
// Device code in decode.cuh. Template: D, NTD, CH, GH, U, UC, PF and the dims Hq, Hkv, Tk.
ksdec::decode_split<T, D, NTD, CH, GH, U, UC, PF, Hq, Hkv, Tk>(q, k, v, part);
