// attention, expert: decode (Tq == 1) in one launch: clusters of NC blocks split the keys of one KV head and
// merge in distributed shared memory into o. Device code in decode.cuh. Template: D, NTD, NC, IL, GH, U, UC, PF
// and the dims Hq, Hkv, Tk. The plan's `cluster` field makes ksearch declare the kernel with __cluster_dims__.
ksdec::decode_cluster<T, D, NTD, NC, IL, GH, U, UC, PF, Hq, Hkv, Tk>(q, k, v, o);
