// attention, expert: decode (Tq == 1) in one launch without clusters (LM = 1): the split blocks of decode_split,
// each signing its partial in `part`, the blocks that see every signature of a (KV head, head group) merging
// the partials into o. Device code in decode.cuh. Template: D, NTD, CH, GH, U, UC, PF and the dims Hq, Hkv, Tk.
ksdec::decode_last<T, D, NTD, CH, GH, U, UC, PF, Hq, Hkv, Tk>(q, k, v, o, part);
