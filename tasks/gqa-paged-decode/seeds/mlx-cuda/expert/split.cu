kspaged::split<T, D, Hq, Hkv, CH, NW, KT>(q, k_cache, v_cache, kv_indptr, kv_indices, part, B[0]);
